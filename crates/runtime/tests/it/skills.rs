//! Skills: parsing, precedence, agent prefixes, broken files keeping the old version, binding.

use std::collections::BTreeMap;
use std::path::Path;

use strata_runtime::skills::{SkillAction, SkillDir, SkillSet, shell_quote, skill_dirs};

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

const ECHO: &str = "name: greet\ndescription: from {layer}\nparameters:\n  who: {type: string, required: true, description: Who}\n  mood: {type: string, choices: [happy, sad]}\n  times: {type: integer, default: \"1\"}\ncommand: echo hello {who} {mood} {times}\n";

fn set(module: &Path, overlay: &Path) -> SkillSet {
    let base = vec![SkillDir {
        path: module.to_path_buf(),
        origin: "module:ops".into(),
        prefix: String::new(),
    }];
    SkillSet::load(skill_dirs(&base, overlay))
}

#[test]
fn later_layers_win_and_agent_skills_are_prefixed() {
    let module = tempfile::tempdir().expect("tmp");
    let overlay = tempfile::tempdir().expect("tmp");
    write(
        module.path(),
        "greet.yaml",
        &ECHO.replace("{layer}", "module"),
    );
    write(
        module.path(),
        "only-module.yaml",
        "name: only-module\ndescription: m\nprompt: hi\n",
    );
    write(
        overlay.path(),
        "skills/greet.yaml",
        &ECHO.replace("{layer}", "overlay"),
    );
    write(
        overlay.path(),
        "agents/main/skills/greet.yml",
        &ECHO.replace("{layer}", "agent"),
    );
    write(overlay.path(), "skills/notes.txt", "ignored: not yaml");
    let s = set(module.path(), overlay.path());
    let snap = s.snapshot();
    let names: Vec<&str> = snap.keys().map(String::as_str).collect();
    assert_eq!(names, ["greet", "main:greet", "only-module"]);
    assert_eq!(snap["greet"].def.description, "from overlay");
    assert_eq!(snap["greet"].origin, "overlay");
    assert_eq!(snap["main:greet"].origin, "agent:main");
    assert_eq!(snap["only-module"].origin, "module:ops");
}

#[test]
fn a_broken_file_keeps_the_previous_version_and_a_fixed_one_reloads() {
    let module = tempfile::tempdir().expect("tmp");
    let overlay = tempfile::tempdir().expect("tmp");
    write(
        overlay.path(),
        "skills/greet.yaml",
        &ECHO.replace("{layer}", "v1"),
    );
    let s = set(module.path(), overlay.path());
    assert_eq!(s.get("greet").expect("v1").def.description, "from v1");

    write(
        overlay.path(),
        "skills/greet.yaml",
        "name: greet\ndescription: [unclosed\n",
    );
    let errors = s.reload();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].contains("greet.yaml"), "{errors:?}");
    assert_eq!(s.get("greet").expect("kept").def.description, "from v1");

    write(
        overlay.path(),
        "skills/greet.yaml",
        &ECHO.replace("{layer}", "v2"),
    );
    assert!(s.reload().is_empty());
    assert_eq!(s.get("greet").expect("v2").def.description, "from v2");

    // Both or neither of prompt/command: refused.
    write(
        overlay.path(),
        "skills/bad.yaml",
        "name: bad\ndescription: x\nprompt: a\ncommand: b\n",
    );
    let errors = s.reload();
    assert!(
        errors.iter().any(|e| e.contains("exactly one of")),
        "{errors:?}"
    );
    assert!(s.get("bad").is_none());
    // An unknown key is an error too.
    write(
        overlay.path(),
        "skills/bad.yaml",
        "name: bad\ndescription: x\nprompt: a\nmodel: y\n",
    );
    assert!(
        s.reload()
            .iter()
            .any(|e| e.contains("unknown field `model`"))
    );
}

#[test]
fn binding_checks_parameters_and_commands_quote_values() {
    let module = tempfile::tempdir().expect("tmp");
    let overlay = tempfile::tempdir().expect("tmp");
    write(
        overlay.path(),
        "skills/greet.yaml",
        &ECHO.replace("{layer}", "x"),
    );
    let skill = set(module.path(), overlay.path())
        .get("greet")
        .expect("greet");
    let p = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    assert!(
        skill
            .bind(&p(&[]))
            .expect_err("missing")
            .to_string()
            .contains("needs parameter `who`")
    );
    assert!(
        skill
            .bind(&p(&[("who", "a"), ("mood", "angry")]))
            .expect_err("choice")
            .to_string()
            .contains("one of happy, sad")
    );
    assert!(
        skill
            .bind(&p(&[("who", "a"), ("times", "x")]))
            .expect_err("int")
            .to_string()
            .contains("integer")
    );
    assert!(
        skill
            .bind(&p(&[("who", "a"), ("colour", "red")]))
            .expect_err("unknown")
            .to_string()
            .contains("no parameter `colour`")
    );
    let values = skill
        .bind(&p(&[("who", "x'; rm -rf /; echo '"), ("mood", "happy")]))
        .expect("ok");
    assert_eq!(values["times"], "1", "default filled in");
    match skill.render(&values) {
        SkillAction::Command(c) => assert_eq!(
            c,
            format!(
                "echo hello {} 'happy' '1'",
                shell_quote("x'; rm -rf /; echo '")
            )
        ),
        _ => panic!("command skill"),
    }
    assert_eq!(shell_quote("it's"), r"'it'\''s'");
}

/// Runs `command` with `sh -c` and returns its standard output.
fn sh(command: &str) -> String {
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .output()
        .expect("sh");
    assert!(o.status.success(), "{command}: {o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn command_skill(template: &str, params: &[&str]) -> strata_runtime::skills::Skill {
    let mut yaml = String::from("name: t\ndescription: d\nparameters:\n");
    for p in params {
        yaml.push_str(&format!("  {p}: {{type: string}}\n"));
    }
    yaml.push_str(&format!(
        "command: {}\n",
        serde_json::to_string(template).expect("json")
    ));
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "skills/t.yaml", &yaml);
    SkillSet::load(skill_dirs(&[], dir.path()))
        .get("t")
        .expect("loaded")
}

#[test]
fn a_value_naming_another_parameter_stays_text_and_never_breaks_out() {
    // Substituting parameter by parameter spliced b's quoted value inside a's quotes:
    // `echo {a} {b}` with a="{b}" ran `echo INJECTED`.
    let skill = command_skill("echo {a} {b}", &["a", "b"]);
    let values = skill
        .bind(&p(&[("a", "{b}"), ("b", "; echo INJECTED #")]))
        .expect("bind");
    let SkillAction::Command(c) = skill.render(&values) else {
        panic!("command skill")
    };
    assert_eq!(sh(&c), "{b} ; echo INJECTED #\n");

    // Three parameters, each naming the next, quotes, braces, newlines and `$(...)`.
    let skill = command_skill("printf '%s|' {a} {b} {c} {a}", &["a", "b", "c"]);
    let cases = [
        ("{b}{c}", "{c}'\"", "line1\nline2 $(touch pwned) `id`"),
        ("'", "''{a}''", "}{"),
        ("{", "}", "{{c}}"),
    ];
    for (a, b, c) in cases {
        let values = skill
            .bind(&p(&[("a", a), ("b", b), ("c", c)]))
            .expect("bind");
        let SkillAction::Command(cmd) = skill.render(&values) else {
            panic!("command skill")
        };
        assert_eq!(sh(&cmd), format!("{a}|{b}|{c}|{a}|"), "{cmd}");
    }

    // Prompts are substituted in one pass too (a value is never re-read as a template).
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "skills/p.yaml",
        "name: p\ndescription: d\nparameters:\n  x: {}\n  y: {}\nprompt: \"{x} and {y} but {z}\"\n",
    );
    let skill = SkillSet::load(skill_dirs(&[], dir.path()))
        .get("p")
        .expect("p");
    let values = skill.bind(&p(&[("x", "{y}"), ("y", "Y")])).expect("bind");
    match skill.render(&values) {
        SkillAction::Prompt(t) => assert_eq!(t, "{y} and Y but {z}"),
        _ => panic!("prompt skill"),
    }
}

#[test]
fn a_nul_byte_in_a_value_is_refused_by_name() {
    let skill = command_skill("echo {a}", &["a"]);
    let e = skill
        .bind(&p(&[("a", "x\0y")]))
        .expect_err("NUL")
        .to_string();
    assert!(e.contains("parameter `a` contains a NUL byte"), "{e}");
}

fn p(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn skill_tool_names_stay_within_what_every_provider_accepts() {
    use strata_runtime::skills::tool_name;
    assert_eq!(tool_name("disk-usage"), "skill__disk-usage");
    assert_eq!(tool_name("main:hello"), "skill__main__hello");
    let long_a = format!("agent:{}", "a".repeat(80));
    let long_b = format!("agent:{}b", "a".repeat(79));
    let (a, b) = (tool_name(&long_a), tool_name(&long_b));
    assert_ne!(a, b, "long names stay distinct");
    for n in [&a, &b] {
        assert!(n.len() <= 64, "{n}");
        assert!(
            n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{n}"
        );
    }
    assert_eq!(tool_name(&long_a), a, "stable");
}
