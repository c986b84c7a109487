// Types only in this stand-in.
export {};
