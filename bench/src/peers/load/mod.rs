//! The load generators: [`closed`] sends each connection's requests back to back, [`open`] holds a
//! fixed request rate and measures latency from each request's scheduled send time.

pub mod closed;
pub mod open;
