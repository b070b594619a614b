//! tracer-agent library.
