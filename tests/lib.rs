//! Shared helpers for the end-to-end tests: locating the built binaries,
//! running tshark with the dissector, and network namespaces.

pub mod bins;
pub mod netns;
pub mod pcap;
pub mod procs;
pub mod scenario;
pub mod skip;
pub mod spoof;
pub mod tshark;
