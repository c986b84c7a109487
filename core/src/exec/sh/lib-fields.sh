# shellcheck shell=sh
# Reads the request's fields from stdin, as `push_field` (exec/wrapper.rs)
# writes them: a line with the field's line count, then that many lines. Used
# by wrapper.sh and process/sh/spawn.sh.
#
# Only the `read` builtin: a short request costs no process start. `read`
# takes one byte per system call from a pipe (about a millisecond per KiB),
# which is why a command over INLINE_COMMAND_MAX comes after the fields, for
# one `head -c`, instead of in one.
#
# minify: newline_char=N read_field=g field_lines=gn field_line=gl field_value=v

newline_char='
'

# Sets field_value to the next field. Fails when stdin ends before the field
# does or the count is not a number (a request cut short: run nothing).
read_field() {
	IFS= read -r field_lines || return 1
	case $field_lines in ''|*[!0-9]*) return 1;; esac
	field_value=
	while [ "$field_lines" -gt 0 ]; do
		IFS= read -r field_line || return 1
		field_value=$field_value$field_line
		field_lines=$((field_lines-1))
		[ "$field_lines" -eq 0 ] || field_value=$field_value$newline_char
	done
}
