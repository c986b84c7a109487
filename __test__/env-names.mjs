// Every env name a caller may set that a clash with the in-pod scripts'
// variables could lose (the scripts are minified to one- and two-letter
// names): the 52 one-letter names and `_`, some two-letter ones, and common
// names, each with a value no quoting could pass through unchanged. Used by
// the exec, spawn and terminal suites, which read them all back.

const OTHERS = ["gn", "gl", "nu", "st", "ka", "kp", "xt", "wa", "at", "pi", "od", "hd", "PATH", "HOME", "OLDPWD", "SHELL", "LANG", "LC_ALL", "TERM", "USER", "TMPDIR", "CDPATH", "ENV", "PS1", "PS4", "HOSTNAME", "SHLVL"];

/** @returns {Record<string, string>} */
export function everyEnvName() {
  const letters = [..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"];
  /** @type {Record<string, string>} */
  const env = {};
  [...letters, ...OTHERS].forEach((name, i) => {
    // No carriage return: a terminal turns the newlines it prints into CR LF.
    env[name] = [` ${name} $(echo no) \`echo no\` '"\\n\\\\ \n\nline ü `, `${name}\n`, "", `$(${name}) \${${name}} "$@" *`][i % 4];
  });
  return env;
}

/**
 * A command that prints each value of `env` followed by a NUL, first as its
 * own shell sees them, then as a child `/bin/sh` does (so exported too). Only
 * builtins and absolute paths: PATH is among the names.
 * @param {Record<string, string>} env
 */
export function printEnvCommand(env) {
  const script = `printf '%s\\0'${Object.keys(env).map((n) => ` "\${${n}}"`).join("")}`;
  return `${script}; /bin/sh -c '${script.replaceAll("'", "'\\''")}'`;
}

/**
 * What printEnvCommand prints when every value arrived exactly.
 * @param {Record<string, string>} env
 */
export function printedEnv(env) {
  const once = Object.values(env).map((v) => `${v}\0`).join("");
  return once + once;
}
