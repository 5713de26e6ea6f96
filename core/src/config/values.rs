//! Value types of the configuration file that are not plain TOML scalars: humantime durations, durations
//! that may be `"none"`, byte sizes, and the `"auto"`-or-value settings. Each (de)serializes to the same
//! text a user writes, so `edge --check` prints a config that loads again.

use std::{fmt, str::FromStr, time::Duration};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A duration written as a humantime string ("250ms", "30s", "10m").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl Dur {
    /// Shorthand for a duration of `s` seconds.
    pub const fn secs(s: u64) -> Self {
        Dur(Duration::from_secs(s))
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map(Dur).map_err(|e| {
            de::Error::custom(format!(
                "invalid duration {text:?} ({e}); write e.g. \"250ms\", \"30s\""
            ))
        })
    }
}

/// A duration that may be `"none"` (no limit). `None` means unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit(pub Option<Duration>);

impl Serialize for Limit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(d) => Dur(d).serialize(s),
            None => s.serialize_str("none"),
        }
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text == "none" {
            return Ok(Limit(None));
        }
        humantime::parse_duration(&text)
            .map(|d| Limit(Some(d)))
            .map_err(|e| {
                de::Error::custom(format!(
                    "invalid duration {text:?} ({e}); write e.g. \"30s\" or \"none\""
                ))
            })
    }
}

/// A size in bytes: an integer, or a string with a unit ("16KiB", "64MiB", "1GiB", "512B").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl FromStr for Bytes {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        let n: u64 = digits.parse().map_err(|_| {
            format!("invalid size {text:?}; write e.g. 16384, \"16KiB\", \"64MiB\"")
        })?;
        let mult: u64 = match unit.trim() {
            "" | "B" => 1,
            "KiB" | "K" | "KB" | "k" => 1 << 10,
            "MiB" | "M" | "MB" => 1 << 20,
            "GiB" | "G" | "GB" => 1 << 30,
            other => {
                return Err(format!(
                    "invalid size unit {other:?} in {text:?}; use B, KiB, MiB or GiB"
                ))
            }
        };
        n.checked_mul(mult)
            .map(Bytes)
            .ok_or_else(|| format!("size {text:?} overflows"))
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
            write!(f, "{}GiB", n >> 30)
        } else if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
            write!(f, "{}MiB", n >> 20)
        } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
            write!(f, "{}KiB", n >> 10)
        } else {
            write!(f, "{n}B")
        }
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Accepts an integer or a string; used by [`Bytes`] and [`ByteLimit`].
#[derive(Deserialize)]
#[serde(untagged)]
enum IntOrStr {
    Int(u64),
    Str(String),
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match IntOrStr::deserialize(d).map_err(|_| {
            de::Error::custom("expected a size: an integer or a string like \"16KiB\"")
        })? {
            IntOrStr::Int(n) => Ok(Bytes(n)),
            IntOrStr::Str(s) => s.parse().map_err(de::Error::custom),
        }
    }
}

/// A size that may be `"none"` (no limit). `None` means unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteLimit(pub Option<u64>);

impl Serialize for ByteLimit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(n) => Bytes(n).serialize(s),
            None => s.serialize_str("none"),
        }
    }
}

impl<'de> Deserialize<'de> for ByteLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match IntOrStr::deserialize(d)
            .map_err(|_| de::Error::custom("expected a size or \"none\""))?
        {
            IntOrStr::Int(n) => Ok(ByteLimit(Some(n))),
            IntOrStr::Str(s) if s == "none" => Ok(ByteLimit(None)),
            IntOrStr::Str(s) => s
                .parse::<Bytes>()
                .map(|b| ByteLimit(Some(b.0)))
                .map_err(de::Error::custom),
        }
    }
}

/// `server.workers`: `"auto"` or a positive integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workers {
    /// min(CPUs in the affinity mask, ceil(cgroup cpu.max quota / period)); DESIGN.md "Process model".
    Auto,
    /// Exactly this many worker threads.
    Count(usize),
}

impl FromStr for Workers {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(Workers::Auto);
        }
        match s.parse::<usize>() {
            Ok(n) if n > 0 => Ok(Workers::Count(n)),
            _ => Err(format!(
                "invalid workers {s:?}: \"auto\" or a positive integer"
            )),
        }
    }
}

impl Serialize for Workers {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Workers::Auto => s.serialize_str("auto"),
            Workers::Count(n) => s.serialize_u64(*n as u64),
        }
    }
}

impl<'de> Deserialize<'de> for Workers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match IntOrStr::deserialize(d)
            .map_err(|_| de::Error::custom("expected \"auto\" or a positive integer"))?
        {
            IntOrStr::Int(n) => n.to_string().parse().map_err(de::Error::custom),
            IntOrStr::Str(s) => s.parse().map_err(de::Error::custom),
        }
    }
}

/// `server.pin_workers`: `"auto"`, `true` or `false`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinWorkers {
    /// Pin only when the affinity mask has exactly `workers` CPUs (a dedicated cpuset).
    Auto,
    /// Always pin worker i to the i-th CPU of the mask (modulo its size).
    Always,
    /// Never pin.
    Never,
}

impl Serialize for PinWorkers {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PinWorkers::Auto => s.serialize_str("auto"),
            PinWorkers::Always => s.serialize_bool(true),
            PinWorkers::Never => s.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for PinWorkers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum BoolOrStr {
            Bool(bool),
            Str(String),
        }
        match BoolOrStr::deserialize(d)
            .map_err(|_| de::Error::custom("expected \"auto\", true or false"))?
        {
            BoolOrStr::Bool(true) => Ok(PinWorkers::Always),
            BoolOrStr::Bool(false) => Ok(PinWorkers::Never),
            BoolOrStr::Str(s) if s == "auto" => Ok(PinWorkers::Auto),
            BoolOrStr::Str(s) => Err(de::Error::custom(format!(
                "invalid pin_workers {s:?}: \"auto\", true or false"
            ))),
        }
    }
}

/// `server.io_driver`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoDriverSetting {
    /// io_uring, falling back to epoll when the ring cannot be set up.
    Auto,
    /// io_uring or a startup error.
    IoUring,
    /// epoll always.
    Epoll,
}

impl FromStr for IoDriverSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "io_uring" => Ok(Self::IoUring),
            "epoll" => Ok(Self::Epoll),
            _ => Err(format!("invalid io driver {s:?}: auto, io_uring or epoll")),
        }
    }
}

/// `log.format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable `key=value` lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(format!("invalid log format {s:?}: text or json")),
        }
    }
}

/// `log.access_format` (DESIGN.md "Observability").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessFormat {
    /// One JSON object per line.
    Json,
    /// `key=value` pairs (logfmt).
    Text,
    /// nginx/Apache combined, then the duration in seconds and the request id.
    Combined,
}

/// `log.traceparent`: W3C trace context handling (DESIGN.md "Observability").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceMode {
    /// Forward a valid `traceparent` (with `tracestate`); replace an invalid one and start one when
    /// absent (random ids, sampled flag off; `tracestate` dropped).
    Propagate,
    /// Pass `traceparent` and `tracestate` through as received; a valid trace id is logged.
    Forward,
    /// Pass them through; no trace id in log lines.
    Off,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print_round_trip() {
        for (text, n) in [
            ("16KiB", 16384),
            ("64MiB", 64 << 20),
            ("512B", 512),
            ("1GiB", 1 << 30),
            ("100", 100),
        ] {
            let b: Bytes = text.parse().unwrap();
            assert_eq!(b.0, n, "{text}");
            assert_eq!(b.to_string().parse::<Bytes>().unwrap(), b);
        }
        assert!("12XB".parse::<Bytes>().is_err());
        assert!("KiB".parse::<Bytes>().is_err());
    }

    #[test]
    fn workers_reject_zero() {
        assert!("0".parse::<Workers>().is_err());
        assert_eq!("auto".parse::<Workers>().unwrap(), Workers::Auto);
        assert_eq!("3".parse::<Workers>().unwrap(), Workers::Count(3));
    }
}
