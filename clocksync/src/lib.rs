//! Clocks, offset measurement, servos and the global software clock.
