//! The in-pod scripts, from their readable sources (`core/src/*/sh/*.sh`) to
//! the text the engine sends. Used by the build script (`core/build/main.rs`)
//! and by the tests (`core/tests/minify.rs`, `core/tests/shell_scripts.rs`).
//!
//! Every exec request carries its script in the URL (argv), form-urlencoded,
//! so each byte of script costs one to three bytes of every request. The
//! sources are written to be read (comments, indentation, descriptive names);
//! [`minify`] takes out what costs bytes and changes nothing the shell
//! executes:
//!
//! 1. Lines that hold only a comment, and blank lines, are dropped; leading
//!    blanks of a line and blanks before its end are dropped. A comment after
//!    a command is refused (write it on its own line), as are here-documents
//!    and backquotes, so that nothing here must understand them, and carriage
//!    returns (a CRLF checkout).
//! 2. Blanks next to an unquoted `;`, `|` or `&` (operators, which end a word
//!    by themselves) are dropped, and so is the blank in `name() {`. A
//!    newline after an operator (`;`, `;;`, `&&`, `||`, `|`) or `(`, or
//!    before `)`, is dropped (the grammar allows a line break there); one
//!    after `&`, or after `then`, `do`, `else` or `{` right after an operator
//!    or a newline (where they are reserved words that open a body), becomes
//!    a space: `%0A` costs three bytes in the URL, a space one.
//! 3. Names are shortened as the sources declare with `# minify: long=s …`
//!    lines: every whole-word occurrence of `long` becomes `s`, wherever it is
//!    (also inside quotes: `trap '… $long …'` and `eval` strings are code).
//!    So that this cannot change what a script means, a long name must be
//!    lowercase with an underscore (no command, option or protocol word is),
//!    and a short name must not already be a word of the script (beyond an
//!    option letter like `-s`, a format like `%s`, an escape like `\n`, a
//!    suffix like `.k` or a file name like `"$dir/x"`) nor
//!    be the short name of a second long name. (Write arithmetic without
//!    blanks, `$((a-b))`, so that no name in it looks like an option.)
//!
//! Nothing inside quotes, `${…}` or `$((…))` is touched by steps 1 and 2: a
//! small lexer follows quotes, escapes and nesting, and a line that starts
//! inside a quoted string keeps its blanks.
//!
//! [`compose`] puts a script after the libraries it names with
//! `# needs: <path>…` (relative to its own directory; each library once,
//! its own needs first).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A script and its libraries, in the order they are sent.
#[derive(Debug)]
pub(crate) struct Composed {
    /// Every file, libraries first.
    pub files: Vec<PathBuf>,
    /// Their texts concatenated, comments and directives included.
    pub source: String,
}

/// Reads `script` and, first, every library it needs (see the module docs).
pub(crate) fn compose(script: &Path) -> Result<Composed, String> {
    let mut files = Vec::new();
    collect(script, &mut files, &mut Vec::new())?;
    let mut source = String::new();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        source.push_str(&text);
        if !source.ends_with('\n') {
            source.push('\n');
        }
    }
    Ok(Composed { files, source })
}

fn collect(file: &Path, files: &mut Vec<PathBuf>, visiting: &mut Vec<PathBuf>) -> Result<(), String> {
    let file = normalize(file);
    if files.contains(&file) {
        return Ok(());
    }
    if visiting.contains(&file) {
        return Err(format!("{}: `# needs:` cycle", file.display()));
    }
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    visiting.push(file.clone());
    for line in text.lines() {
        if let Some(needs) = line.trim_start().strip_prefix("# needs:") {
            for need in needs.split_whitespace() {
                collect(&file.parent().unwrap_or(Path::new(".")).join(need), files, visiting)?;
            }
        }
    }
    visiting.pop();
    files.push(file);
    Ok(())
}

/// `a/b/../c` → `a/c`, so one library reached by two paths is one file.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The renames a text declares with `# minify: long=short …` lines.
pub(crate) fn renames(source: &str) -> Result<BTreeMap<String, String>, String> {
    let mut map = BTreeMap::new();
    for line in source.lines() {
        let Some(decls) = line.trim_start().strip_prefix("# minify:") else { continue };
        for decl in decls.split_whitespace() {
            let (long, short) =
                decl.split_once('=').ok_or_else(|| format!("`# minify:` wants long=short, got {decl:?}"))?;
            let long_ok = long.contains('_')
                && long.bytes().all(|b| b == b'_' || b.is_ascii_lowercase() || b.is_ascii_digit())
                && long.as_bytes()[0].is_ascii_lowercase();
            if !long_ok {
                return Err(format!("`# minify:` long name {long:?}: lowercase, starting with a letter, with an `_`"));
            }
            if !is_name(short) || short.len() >= long.len() {
                return Err(format!("`# minify:` short name {short:?} of {long:?} is not a shorter shell name"));
            }
            if let Some(old) = map.insert(long.to_owned(), short.to_owned()) {
                if old != short {
                    return Err(format!("`# minify:` {long:?} is renamed both {old:?} and {short:?}"));
                }
            }
        }
    }
    let mut seen = BTreeMap::new();
    for (long, short) in &map {
        if let Some(other) = seen.insert(short, long) {
            return Err(format!("`# minify:` {other:?} and {long:?} are both renamed {short:?}"));
        }
    }
    Ok(map)
}

fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0] == b'_' || b[0].is_ascii_alphabetic())
        && b.iter().all(|c| *c == b'_' || c.is_ascii_alphanumeric())
}

/// The text to send for a composed source (see the module docs).
pub(crate) fn minify(source: &str) -> Result<String, String> {
    if source.contains('\r') {
        // A checkout with CRLF line ends (core.autocrlf): the shell would
        // take each CR for part of a word.
        return Err("a carriage return: the sources must have LF line ends (.gitattributes)".to_owned());
    }
    let map = renames(source)?;
    let mut lexer = Lexer { src: source.as_bytes(), pos: 0, out: Vec::with_capacity(source.len()), line: 1 };
    lexer.code(None)?;
    let stripped = String::from_utf8(lexer.out).map_err(|e| e.to_string())?;
    rename(&stripped, &map)
}

/// Replaces each whole word that is a long name by its short name, after
/// checking that no short name is a word of the text already.
fn rename(text: &str, map: &BTreeMap<String, String>) -> Result<String, String> {
    let shorts: BTreeMap<&str, &str> = map.iter().map(|(l, s)| (s.as_str(), l.as_str())).collect();
    let mut used: BTreeMap<&str, bool> = map.keys().map(|l| (l.as_str(), false)).collect();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if !is_word_byte(bytes[i]) {
            out.push(bytes[i] as char);
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_word_byte(bytes[i]) {
            i += 1;
        }
        let word = &text[start..i];
        if let Some(short) = map.get(word) {
            used.insert(word, true);
            out.push_str(short);
            continue;
        }
        if let Some(long) = shorts.get(word) {
            let before = start.checked_sub(1).map(|j| bytes[j]);
            let before2 = start.checked_sub(2).map(|j| bytes[j]);
            let after = bytes.get(i).copied();
            // Not names: `%s` (a format, a pattern; but `a%s` in arithmetic
            // is), `-s` as an option word, `.k` (a name holds no dot), `\n`.
            let format = before == Some(b'%') && !before2.is_some_and(|b| is_word_byte(b) || b == b')');
            let option = before == Some(b'-')
                && matches!(before2, None | Some(b' ' | b'\t' | b'\n' | b'"' | b'\''))
                && !matches!(after, Some(b')'));
            let suffix = matches!(before, Some(b'.' | b'\\'));
            // A file name in a path, `"$dir/x"` (not `a/x` in arithmetic).
            let file =
                before == Some(b'/') && matches!(after, None | Some(b'"' | b'\'' | b'}' | b'/' | b'.' | b';' | b'\n'));
            if !format && !option && !suffix && !file {
                let line = text[..start].matches('\n').count() + 1;
                return Err(format!(
                    "`# minify:` short name {word:?} (of {long:?}) is already a word of the script, on its line {line} \
                     after stripping: pick another"
                ));
            }
        }
        out.push_str(word);
    }
    if let Some((long, _)) = used.iter().find(|(_, used)| !**used) {
        return Err(format!("`# minify:` {long:?} does not occur in the script"));
    }
    Ok(out)
}

fn is_word_byte(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphanumeric()
}

/// What an unquoted newline leaves to write before the next token.
#[derive(Clone, Copy)]
enum Break {
    /// Nothing (the newline followed an operator).
    None,
    /// A newline, unless `)` comes next.
    Newline,
    /// A space (the newline followed `then`, `do`, `else` or `{`).
    Space,
    /// Nothing, or a space before another `(` (the newline followed `(`).
    AfterOpen,
}

struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    out: Vec<u8>,
    /// For error messages.
    line: usize,
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> Option<u8> {
        self.src.get(self.pos + ahead).copied()
    }

    fn fail<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("line {}: {what}", self.line))
    }

    /// Copies one byte as it is.
    fn take(&mut self) {
        let b = self.src[self.pos];
        if b == b'\n' {
            self.line += 1;
        }
        self.out.push(b);
        self.pos += 1;
    }

    /// Code, up to the end of the text or, inside `$(`, the `)` that closes it.
    fn code(&mut self, close: Option<u8>) -> Result<(), String> {
        let mut line_start = true;
        // The last byte written was an unquoted operator (`;`, `|`, `&`).
        let mut after_op = false;
        // An operator ends what was written: a newline after it is a
        // linebreak the grammar allows, and may go.
        let mut continues = false;
        // The last byte written was an unquoted `)` of a subshell, a case
        // pattern or `name()`: a blank before `{` may go.
        let mut after_paren = false;
        // The last byte written was an unquoted `(`: a newline after it is a
        // blank.
        let mut after_open = false;
        // Where the last separator (operator, newline, `)`) ended: a `then`,
        // `do`, `else` or `{` right after one is a reserved word.
        let mut sep_end = self.out.len();
        // What an unquoted newline left to write before the next token.
        let mut pending = Break::None;
        let mut depth = 0usize;
        loop {
            if line_start {
                while matches!(self.peek(0), Some(b' ' | b'\t')) {
                    self.pos += 1;
                }
                match self.peek(0) {
                    Some(b'#') => {
                        while !matches!(self.peek(0), None | Some(b'\n')) {
                            self.pos += 1;
                        }
                        if self.peek(0).is_some() {
                            self.pos += 1;
                            self.line += 1;
                        }
                        continue;
                    }
                    Some(b'\n') => {
                        self.pos += 1;
                        self.line += 1;
                        continue;
                    }
                    next => {
                        match pending {
                            // Before `)` a newline is only a linebreak: `(a\n)` is `(a)`.
                            Break::Newline if !matches!(next, None | Some(b')')) => {
                                self.out.push(b'\n');
                                sep_end = self.out.len();
                            }
                            Break::Space if next.is_some() => self.out.push(b' '),
                            // `(` `(` is not `((`, which bash reads as arithmetic.
                            Break::AfterOpen if next == Some(b'(') => self.out.push(b' '),
                            // A dropped newline between two operators would
                            // make one (`&` `&` is not `&&`): it stays.
                            Break::None if continues && matches!(next, Some(b';' | b'|' | b'&')) => {
                                if self.out.last() == Some(&b' ') {
                                    self.out.pop();
                                }
                                self.out.push(b'\n');
                                sep_end = self.out.len();
                                after_op = false;
                            }
                            _ => {}
                        }
                        pending = Break::None;
                        line_start = false;
                    }
                }
            }
            let Some(b) = self.peek(0) else {
                if close.is_some() {
                    return self.fail("`$(` is not closed");
                }
                while self.out.last() == Some(&b'\n') {
                    self.out.pop();
                }
                return Ok(());
            };
            match b {
                b' ' | b'\t' => {
                    let mut end = self.pos;
                    while matches!(self.src.get(end), Some(b' ' | b'\t')) {
                        end += 1;
                    }
                    let next = self.src.get(end).copied();
                    if next == Some(b'#') {
                        return self.fail("a comment after a command: put it on a line of its own");
                    }
                    let op_next = matches!(next, Some(b';' | b'|' | b'&'));
                    let drop = matches!(next, None | Some(b'\n'))
                        || (after_op != op_next)
                        || (after_paren && next == Some(b'{'));
                    if !drop {
                        self.out.push(b' ');
                    }
                    self.pos = end;
                    continue;
                }
                b'\n' => {
                    self.pos += 1;
                    self.line += 1;
                    // After a lone `&` (a background job) the newline
                    // becomes a space: `a&b` reads as a typo of `&&`
                    // (shellcheck SC1132).
                    let n = self.out.len();
                    if continues && n >= 2 && self.out[n - 1] == b'&' && self.out[n - 2] != b'&' {
                        self.out.push(b' ');
                    }
                    if !continues {
                        // A newline after a reserved word that opens a body
                        // is a blank: a space costs a third of `%0A`.
                        let opens = ["then", "do", "else", "{"]
                            .iter()
                            .any(|kw| self.out.ends_with(kw.as_bytes()) && self.out.len() - kw.len() == sep_end);
                        pending = if opens {
                            Break::Space
                        } else if after_open {
                            Break::AfterOpen
                        } else {
                            Break::Newline
                        };
                        after_op = false;
                        after_paren = false;
                        after_open = false;
                    }
                    line_start = true;
                    continue;
                }
                b';' | b'|' | b'&' => {
                    let double = self.peek(1) == Some(b);
                    continues = true;
                    self.take();
                    if double {
                        self.take();
                    }
                    after_op = true;
                    after_paren = false;
                    sep_end = self.out.len();
                    continue;
                }
                _ => {}
            }
            after_op = false;
            after_paren = false;
            after_open = false;
            continues = false;
            match b {
                b'\'' => self.single_quoted()?,
                b'"' => self.double_quoted()?,
                b'\\' => {
                    self.take();
                    if self.peek(0).is_none() {
                        return self.fail("a backslash at the end");
                    }
                    self.take();
                }
                b'`' => return self.fail("backquotes: use $(…)"),
                b'$' => self.dollar()?,
                b'<' if self.peek(1) == Some(b'<') => return self.fail("here-documents are not supported"),
                b'#' if matches!(self.out.last(), None | Some(b';' | b'|' | b'&' | b'(' | b' ' | b'\t' | b'\n')) => {
                    return self.fail("a comment after a command: put it on a line of its own");
                }
                b'(' => {
                    depth += 1;
                    self.take();
                    after_open = true;
                }
                b')' if depth == 0 && close.is_some() => {
                    self.take();
                    return Ok(());
                }
                b')' => {
                    depth = depth.saturating_sub(1);
                    self.take();
                    after_paren = true;
                    sep_end = self.out.len();
                }
                _ => self.take(),
            }
        }
    }

    fn single_quoted(&mut self) -> Result<(), String> {
        self.take();
        loop {
            match self.peek(0) {
                None => return self.fail("a single quote is not closed"),
                Some(b'\'') => {
                    self.take();
                    return Ok(());
                }
                Some(_) => self.take(),
            }
        }
    }

    fn double_quoted(&mut self) -> Result<(), String> {
        self.take();
        loop {
            match self.peek(0) {
                None => return self.fail("a double quote is not closed"),
                Some(b'"') => {
                    self.take();
                    return Ok(());
                }
                Some(b'\\') => {
                    self.take();
                    if self.peek(0).is_some() {
                        self.take();
                    }
                }
                Some(b'`') => return self.fail("backquotes: use $(…)"),
                Some(b'$') => self.dollar()?,
                Some(_) => self.take(),
            }
        }
    }

    /// `$…`: `$((…))` and `${…}` copied as they are, `$(…)` as code.
    fn dollar(&mut self) -> Result<(), String> {
        self.take();
        match (self.peek(0), self.peek(1)) {
            (Some(b'('), Some(b'(')) => self.arithmetic(),
            (Some(b'('), _) => {
                self.take();
                self.code(Some(b')'))
            }
            (Some(b'{'), _) => self.braced(),
            // `$#`, `$$` and the like: the byte after `$` is a name, not a comment.
            (Some(b'#' | b'$' | b'?' | b'!' | b'@' | b'*' | b'-'), _) => {
                self.take();
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn arithmetic(&mut self) -> Result<(), String> {
        let mut depth = 0usize;
        loop {
            match self.peek(0) {
                None => return self.fail("`$((` is not closed"),
                Some(b'(') => depth += 1,
                Some(b')') => {
                    depth -= 1;
                    if depth == 0 {
                        self.take();
                        return Ok(());
                    }
                }
                Some(b'$') => {
                    self.dollar()?;
                    continue;
                }
                Some(b'\'' | b'"' | b'`' | b'\\') => return self.fail("quotes inside `$((…))`"),
                _ => {}
            }
            self.take();
        }
    }

    fn braced(&mut self) -> Result<(), String> {
        self.take();
        // `${#name}`: the `#` is the length operator.
        if self.peek(0) == Some(b'#') {
            self.take();
        }
        loop {
            match self.peek(0) {
                None => return self.fail("`${` is not closed"),
                Some(b'}') => {
                    self.take();
                    return Ok(());
                }
                Some(b'\'') => self.single_quoted()?,
                Some(b'"') => self.double_quoted()?,
                Some(b'\\') => {
                    self.take();
                    if self.peek(0).is_some() {
                        self.take();
                    }
                }
                Some(b'`') => return self.fail("backquotes: use $(…)"),
                Some(b'$') => self.dollar()?,
                Some(_) => self.take(),
            }
        }
    }
}
