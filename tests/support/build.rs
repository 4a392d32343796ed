//! Which build of dlock a benchmark measures, for its report: the plain `cargo bench` build (a
//! dynamically linked executable) or the static one (`scripts/static bench ...`), which starts
//! faster.

use std::path::Path;

/// `dlock build: static (target/x86_64-unknown-linux-gnu/release/dlock)` or `... dynamic ...`.
pub fn describe(binary: &Path) -> String {
    let kind = match std::fs::read(binary).ok().and_then(|elf| interpreted(&elf)) {
        Some(false) => "static",
        Some(true) => {
            "dynamic (the plain build; `scripts/static bench ...` measures the static one)"
        }
        None => "unknown (not a 64-bit little-endian ELF file)",
    };
    format!("dlock build: {kind}, {}", binary.display())
}

/// Whether `binary` is dynamically linked, so that an LD_PRELOAD library (libfaketime) reaches it.
/// (The benchmarks include this file for `describe` only.)
#[allow(dead_code)]
pub fn is_dynamic(binary: &Path) -> bool {
    std::fs::read(binary)
        .ok()
        .and_then(|elf| interpreted(&elf))
        .unwrap_or(false)
}

/// Whether a 64-bit little-endian ELF executable names a program interpreter (the dynamic
/// loader): a PT_INTERP program header. `None` for anything else.
fn interpreted(elf: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?));
    let table = usize::try_from(u64_at(0x20)?).ok()?;
    let (size, count) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    for i in 0..count {
        let at = table.checked_add(i.checked_mul(size)?)?;
        let kind = u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?);
        if kind == PT_INTERP {
            return Some(true);
        }
    }
    Some(false)
}
