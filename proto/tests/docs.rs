//! The documentation's error tables are the code's: `docs/api.md` lists every `ErrorCode` with its
//! number, name and whether clients retry it (generated here: `DISKLESS_BLESS=1` rewrites it), and
//! every row of its hand-written tables names a code by the number and name the enum gives it.

use diskless_proto::ErrorCode;

const BEGIN: &str = "<!-- error-codes:begin -->";
const END: &str = "<!-- error-codes:end -->";

fn api_md() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md")
}

fn generated() -> String {
    let mut codes = ErrorCode::ALL.to_vec();
    codes.sort_by_key(|c| c.code());
    let mut t = String::from("| code | name | retriable |\n| --- | --- | --- |\n");
    for c in codes {
        t.push_str(&format!("| {} | `{}` | {} |\n", c.code(), c.name(), if c.retriable() { "yes" } else { "no" }));
    }
    t
}

#[test]
fn the_generated_error_table_is_the_code() {
    let text = std::fs::read_to_string(api_md()).expect("docs/api.md");
    let (head, rest) = text.split_once(BEGIN).expect("the begin marker");
    let (_, tail) = rest.split_once(END).expect("the end marker");
    let want = format!("{head}{BEGIN}\n{}{END}{tail}", generated());
    if std::env::var_os("DISKLESS_BLESS").is_some() {
        std::fs::write(api_md(), &want).expect("rewrite docs/api.md");
        return;
    }
    assert!(text == want, "docs/api.md's error table differs from proto/src/error_code.rs: run DISKLESS_BLESS=1 cargo test -p diskless-proto --test docs");
}

#[test]
fn every_code_a_documentation_table_names_is_the_enums() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let mut rows = 0;
    for entry in std::fs::read_dir(&docs).expect("docs/") {
        let path = entry.expect("a docs entry").path();
        // Pages only: docs/research/ holds notes on Kafka's sources, whose codes are Kafka's.
        if path.is_dir() {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a docs page");
        for line in text.lines() {
            // Rows like "| 42 | `INVALID_REQUEST` | ..." in any table.
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let (Some(code), Some(name)) = (cells.get(1).and_then(|c| c.parse::<i16>().ok()), cells.get(2)) else {
                continue;
            };
            let Some(name) = name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) else { continue };
            let known = ErrorCode::from_code(code)
                .unwrap_or_else(|| panic!("{}: code {code} is not in ErrorCode", path.display()));
            assert_eq!(known.name(), name, "{}: code {code}", path.display());
            rows += 1;
        }
    }
    assert!(rows > ErrorCode::ALL.len(), "the tables were found ({rows} rows)");
}
