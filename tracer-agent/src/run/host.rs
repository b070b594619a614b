//! This host as the agent names it, and its counters as it prints them.

use crate::stats::AgentStats;

/// Print counters to stdout.
pub fn print_stats(stats: &AgentStats, json: bool, last: bool) {
    if json {
        let v = serde_json::json!({ "final": last, "stats": stats });
        println!("{v}");
    } else {
        let prefix = if last { "final " } else { "" };
        println!("{prefix}tracer-agent statistics");
        print!("{}", stats.table());
    }
}

/// Parse /proc/sys/kernel/random/boot_id into 16 bytes.
pub fn boot_id() -> [u8; 16] {
    let s = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hex: Vec<u8> = s.trim().bytes().filter(u8::is_ascii_hexdigit).collect();
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).take(16).enumerate() {
        let digits = std::str::from_utf8(pair).unwrap_or("0");
        out[i] = u8::from_str_radix(digits, 16).unwrap_or(0);
    }
    out
}

/// This host's name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}
