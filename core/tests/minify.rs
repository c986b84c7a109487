//! The build script's minifier (`core/build/shell.rs`): what it takes out,
//! what it must never touch, what it refuses, and that the crate embeds
//! exactly what it makes of the sources. That the minified scripts behave as
//! the sources is what every local test (`local_*.rs`, `hostile_sandbox.rs`)
//! checks by running them; `shell_scripts.rs` lints both.

#[path = "../build/shell.rs"]
#[allow(dead_code)] // this test uses part of the build script's module
mod shell;

use std::path::Path;

mod sent_scripts;

use sent_scripts::sent_scripts;

fn min(source: &str) -> String {
    shell::minify(source).unwrap_or_else(|e| panic!("{e}\n{source}"))
}

fn refused(source: &str) -> String {
    shell::minify(source).expect_err(source)
}

#[test]
fn comments_indentation_and_blanks_go() {
    let source = "# shellcheck shell=sh\n# why\n\nf() {\n\t# inside\n\techo a  b   # \n}\n\n";
    assert_eq!(refused(source), "line 6: a comment after a command: put it on a line of its own");
    let source = "# shellcheck shell=sh\n# why\n\nf() {\n\t# inside\n\techo a  b\t \n}\n\n";
    assert_eq!(min(source), "f(){ echo a b\n}");
}

#[test]
fn blanks_next_to_operators_go_and_line_breaks_where_the_grammar_allows() {
    assert_eq!(min("a ; b && c || d | e & f"), "a;b&&c||d|e&f");
    assert_eq!(min("case $x in a) b ;; *) c ;; esac"), "case $x in a) b;;*) c;;esac");
    assert_eq!(min("a &&\n\tb ||\n\tc |\n\td"), "a&&b||c|d");
    assert_eq!(
        min("a &\nb ;\n# c\n\nd\ncase $x in\n\ta) e ;;\n\t*) f ;;\nesac"),
        "a& b;d\ncase $x in\na) e;;*) f;;esac"
    );
    // A newline between two operators stays: `&` `&` is not `&&`.
    assert_eq!(min("a &\n&b"), "a&\n&b");
    assert_eq!(min("if a; then\n\tb\nelse\n\tc\nfi"), "if a;then b\nelse c\nfi");
    assert_eq!(min("while a; do\n\tb\ndone"), "while a;do b\ndone");
    assert_eq!(min("a || {\n\tb\n}"), "a||{ b\n}");
    assert_eq!(min("(\n\ta\n) &"), "(a)&");
    assert_eq!(min("x=$(\n\ta\n)\n(\n\t(b)\n)"), "x=$(a)\n( (b))");
    // Two operators keep their blank: `; ;` is not `;;`, `| |` not `||`.
    assert_eq!(min("a & &"), "a& &");
}

#[test]
fn a_reserved_word_only_where_it_is_one() {
    // `then`, `do`, `{` as arguments end a command: their newline stays.
    assert_eq!(min("echo then\nb"), "echo then\nb");
    assert_eq!(min("echo do\nb"), "echo do\nb");
    assert_eq!(min("echo {\nb"), "echo {\nb");
    assert_eq!(min("echo \\;then\nb"), "echo \\;then\nb");
    assert_eq!(min("echo ';'then\nb"), "echo ';'then\nb");
    // `$(a) {` is two words, `$(a){` would be one.
    assert_eq!(min("echo $(a) {"), "echo $(a) {");
}

#[test]
fn nothing_inside_quotes_or_expansions_changes() {
    let kept = [
        "echo 'a ;  b\n\t  # not a comment\n  c'",
        "echo \"a ;  b\n\t  # not a comment\n  c $(d) ${e}\"",
        "echo \"$(printf '%s ; %s' \"a  b\" c)\"",
        "x=${y#*\") \"}",
        "x=${y%%  *};z=${#y}",
        "echo $((a + b * (c - 1)))",
        "echo a\\ \\ ;b",
        "echo $# $$ $? a#b",
        "n='\n'",
    ];
    for source in kept {
        assert_eq!(min(source), source, "{source}");
    }
    // A line that starts inside a quoted string keeps its indentation; code
    // inside `$(…)` is code.
    assert_eq!(min("a='x\n    y' ;\n  b $(c ;\n  d)"), "a='x\n    y';b $(c;d)");
}

#[test]
fn what_it_does_not_understand_it_refuses() {
    assert!(refused("cat <<EOF\nx\nEOF").contains("here-documents"));
    assert!(refused("echo `date`").contains("backquotes"));
    assert!(refused("echo 'open").contains("single quote"));
    assert!(refused("echo \"open").contains("double quote"));
    assert!(refused("echo $(open").contains("`$(` is not closed"));
    assert!(refused("a;# comment").contains("comment after a command"));
    assert!(refused("a\r\nb\r\n").contains("carriage return"));
}

#[test]
fn names_are_shortened_everywhere_they_are_words() {
    let source = "# minify: run_id=i send_trailer=t\nsend_trailer() { echo \"$run_id\" ${run_id%.*}; }\n\
                  trap 'send_trailer $run_id' EXIT\nrun_id=1 ; send_trailer\necho run_ids x_run_id";
    assert_eq!(min(source), "t(){ echo \"$i\" ${i%.*};}\ntrap 't $i' EXIT\ni=1;t\necho run_ids x_run_id");
}

#[test]
fn a_rename_that_could_change_a_script_is_refused() {
    // The short name is already a name of the script.
    assert!(refused("# minify: run_id=i\ni=2\necho $run_id").contains("\"i\""));
    assert!(refused("# minify: run_id=b\necho $((a/b)) $run_id").contains("\"b\""));
    assert!(refused("# minify: run_id=b\necho $((a%b)) $run_id").contains("\"b\""));
    assert!(refused("# minify: run_id=b\ncase $x in b|c) ;; esac; echo $run_id").contains("\"b\""));
    // But not an option letter, a format, an escape, a suffix or a file name.
    assert_eq!(
        min("# minify: run_id=s\nprintf '%s\\n' \"$run_id\" -s \"$d.s\" \"$d/s\"\nread -s"),
        "printf '%s\\n' \"$s\" -s \"$d.s\" \"$d/s\"\nread -s"
    );
    // Long names are lowercase with an underscore (never a command or a
    // protocol word), each renamed once, no two to one short name, and used.
    assert!(refused("# minify: timeout=t\necho").contains("long name"));
    assert!(refused("# minify: a_b=c a_b=d\necho $a_b").contains("both"));
    assert!(refused("# minify: a_b=c d_e=c\necho $a_b $d_e").contains("both renamed"));
    assert!(refused("# minify: a_b=c\necho").contains("does not occur"));
    assert!(refused("# minify: a_b=a_bc\necho $a_b").contains("not a shorter"));
}

#[test]
fn libraries_come_first_once_and_the_crate_embeds_what_the_build_makes() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let composed = shell::compose(&src.join("process/sh/signal.sh")).unwrap();
    let names: Vec<_> = composed.files.iter().map(|f| f.strip_prefix(&src).unwrap().display().to_string()).collect();
    assert_eq!(
        names,
        [
            "exec/sh/lib-proc.sh",
            "process/sh/lib-status.sh",
            "process/sh/lib-record.sh",
            "exec/sh/lib-kill.sh",
            "process/sh/signal.sh"
        ]
    );
    for (path, sent) in sent_scripts() {
        let composed = shell::compose(&src.join(path)).unwrap();
        assert_eq!(shell::minify(&composed.source).unwrap(), sent, "{path}");
        // No comment, directive or long name reaches the pod.
        assert!(!sent.lines().any(|l| l.trim_start().starts_with('#')), "{path}");
        for long in shell::renames(&composed.source).unwrap().keys() {
            assert!(!sent.contains(long.as_str()), "{path}: {long}");
        }
    }
}
