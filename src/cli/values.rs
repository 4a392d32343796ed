//! Values clap reads that are neither durations nor its own kinds: `--limit`'s seats and the
//! switches a variable sets (`DLOCK_NO_WAIT=1`).

/// `--limit`'s seats: a whole number from 1 (clap's own range check would say `0 is not in
/// 1..=4294967295`).
pub fn parse_seats(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err("a limit is at least 1 seat".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "use a whole number of seats from 1 to {}",
            u32::MAX
        )),
    }
}

/// A switch from the environment (`DLOCK_NO_WAIT=1`); on the command line clap gives it "true".
pub fn parse_switch(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("use 1 or 0 (or true/false, yes/no, on/off)".into()),
    }
}
