//! Shared helpers for the end-to-end tests: locating the built binaries,
//! running tshark with the dissector, network namespaces, and the
//! workspace's own sources for the structure checks.

pub mod bins;
pub mod netns;
pub mod pcap;
pub mod procs;
pub mod scenario;
pub mod skip;
pub mod source_tree;
pub mod spoof;
pub mod tshark;
