//! Running the `kiln` binary as a user would, for the CLI tests.

use std::process::{Command, Output};

/// `kiln ARGS` with `env` set, to completion.
pub fn kiln_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run the kiln binary")
}

/// `kiln ARGS`, to completion.
pub fn kiln(args: &[&str]) -> Output {
    kiln_env(args, &[])
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The ids `kiln generate ARGS --json` generated, or its error text.
pub fn generated_ids(args: &[&str]) -> Result<Vec<u64>, String> {
    let mut all = vec!["generate"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = kiln(&all);
    if !out.status.success() {
        return Err(text(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok(v["ids"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
        .unwrap_or_default())
}
