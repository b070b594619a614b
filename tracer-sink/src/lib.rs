//! tracer-sink library.
