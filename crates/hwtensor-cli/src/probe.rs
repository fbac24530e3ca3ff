//! `hwtensor probe`: the backings of this machine, its GPU adapters and the process device.

use std::io::Write;

use hwtensor::TensorMemory;

/// The version of `probe --json`'s layout, the report's `schema` field: raised when a field
/// changes meaning or goes, so a script that reads the report can tell (new fields are added
/// without a new version).
const PROBE_SCHEMA: u32 = 1;

pub fn run(json: bool) -> crate::Result {
    // Written with `?`, not println!: a reader that closes the pipe early (`| head`) ends the
    // command with an error line instead of a panic.
    let mut out = std::io::stdout().lock();
    let rows: Vec<(TensorMemory, Option<String>)> = TensorMemory::ALL
        .into_iter()
        .map(|m| (m, m.unavailable_reason()))
        .collect();
    if json {
        let backings: Vec<_> = rows
            .iter()
            .map(|(m, why)| serde_json::json!({ "memory": m.name(), "code": m.code(), "available": why.is_none(), "reason": why }))
            .collect();
        let report = serde_json::json!({ "schema": PROBE_SCHEMA, "backings": backings, "gpu": crate::platform::probe_json() });
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    writeln!(out, "{:<8} {:<10} why not", "backing", "available")?;
    for (m, why) in rows {
        let available = if why.is_none() { "yes" } else { "no" };
        writeln!(
            out,
            "{:<8} {:<10} {}",
            m.name(),
            available,
            why.unwrap_or_default()
        )?;
    }
    crate::platform::probe_text(&mut out)?;
    Ok(())
}
