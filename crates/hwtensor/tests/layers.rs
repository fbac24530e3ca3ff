//! The layer list of `docs/architecture.md`, made executable: every module of the core's
//! `src/` sits in one layer of that table, and no module names (in a `use`, a path or a
//! re-exported item of the crate root) a module of a layer above its own. Comments, strings and
//! a file's `#[cfg(test)] mod tests` are not looked at: docs may link anywhere, and tests may
//! build whatever they need.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where the table is, and the heading it follows.
const ARCHITECTURE: &str = "../../docs/architecture.md";
const TABLE_HEADING: &str = "## The layers, as the layer test reads them";

/// The layers bottom first, each with its modules, as the docs' table lists them.
fn layers() -> Vec<(String, Vec<String>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(ARCHITECTURE);
    let docs = std::fs::read_to_string(&path).expect("docs/architecture.md");
    let table = docs
        .split(TABLE_HEADING)
        .nth(1)
        .expect("the layer table's heading in docs/architecture.md");
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header row and its rule
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let modules = cells[2]
                .split(',')
                .map(|m| m.trim().trim_matches('`').to_string())
                .filter(|m| !m.is_empty())
                .collect();
            (cells[1].to_string(), modules)
        })
        .collect()
}

/// The crate root's modules, and which module each name it re-exports comes from.
fn root(src: &Path) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let lib = code_of(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut modules = BTreeSet::new();
    let mut exported = BTreeMap::new();
    for statement in lib.split(';') {
        let s = statement.trim();
        let words: Vec<&str> = s.split_whitespace().collect();
        if let Some(at) = words.iter().position(|w| *w == "mod") {
            if let Some(name) = words.get(at + 1) {
                modules.insert(name.to_string());
            }
        }
        if let Some(rest) = s.split("pub use ").nth(1) {
            let (module, items) = rest.split_once("::").unwrap_or((rest, ""));
            for item in items.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
                if !item.is_empty() {
                    exported.insert(item.to_string(), module.to_string());
                }
            }
        }
    }
    (modules, exported)
}

/// The code of a file: without its tests module, comments and string literals.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut in_string = false;
        let mut escaped = false;
        for c in line.chars() {
            match (in_string, escaped, c) {
                (true, false, '\\') => escaped = true,
                (true, false, '"') => in_string = false,
                (true, _, _) => escaped = false,
                (false, _, '"') => in_string = true,
                (false, _, c) => out.push(c),
            }
        }
        out.push('\n');
    }
    out
}

/// The names that follow `crate::` in `code`: a module or a root item, or each head of a
/// `crate::{a, b::c}` group.
fn crate_names(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for part in code.split("crate::").skip(1) {
        let heads: Vec<&str> = match part.strip_prefix('{') {
            Some(group) => top_level_items(group),
            None => vec![part],
        };
        for head in heads {
            let name: String = head
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// The comma-separated items of a `{...}` group up to its closing brace, nested groups kept
/// whole (their heads are what count).
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_of_the_core_imports_a_module_of_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layers = layers();
    assert!(
        layers.len() >= 5,
        "the layer table has {} rows",
        layers.len()
    );
    let level: BTreeMap<&str, (usize, &str)> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, (name, mods))| mods.iter().map(move |m| (m.as_str(), (i, name.as_str()))))
        .collect();
    let (modules, exported) = root(&src);
    let unplaced: Vec<&String> = modules
        .iter()
        .filter(|m| !level.contains_key(m.as_str()) && !m.starts_with("d3d11_"))
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules in no layer of docs/architecture.md: {unplaced:?}"
    );
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let top = relative.iter().next().unwrap().to_string_lossy();
        let own = top.trim_end_matches(".rs");
        let Some(&(mine, my_layer)) = level.get(own) else {
            continue; // lib.rs, and the test-only path module
        };
        if relative.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        for name in crate_names(&code) {
            let module = match modules.contains(&name) {
                true => name.as_str(),
                false => match exported.get(&name) {
                    Some(m) => m.as_str(),
                    None => continue, // a macro, or a name the root defines itself
                },
            };
            if let Some(&(theirs, their_layer)) = level.get(module) {
                if theirs > mine {
                    upward.push(format!(
                        "{} ({my_layer}) names crate::{name}, of {module} ({their_layer})",
                        relative.display()
                    ));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that run up:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_checker_sees_an_upward_import_in_a_group_and_ignores_comments_and_strings() {
    let code = code_of(
        "use crate::{os::fd, Tensor, gpu::{a, b}};\n// crate::stream\nlet s = \"crate::blob\";\n",
    );
    let names = crate_names(&code);
    let expected: BTreeSet<String> = ["os", "Tensor", "gpu"].map(String::from).into();
    assert_eq!(names, expected);
}
