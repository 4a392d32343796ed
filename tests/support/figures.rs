//! How the benchmarks report: milliseconds, medians, and a goal met or missed.

use std::time::Duration;

/// Prints `value` against its goal, `target` ("`>= 2`"), and whether it is `met`.
pub fn goal(what: &str, value: f64, target: &str, met: bool) {
    let verdict = if met { "met" } else { "MISSED" };
    println!("  => {what}: {value:.2} (goal {target}: {verdict})");
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median of `values`.
pub fn middle(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
