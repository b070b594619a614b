//! BPF probes. One module per probe; its C source lives in ebpf/.

pub mod slots;
pub mod tx;
