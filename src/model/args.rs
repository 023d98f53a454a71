//! Argument checks, mirroring `lua/prelude.lua` check for check and message
//! for message, in the order each script makes them.
//!
//! The model takes typed integers, so of the prelude's integer checks only
//! the range check can fail (and the length check, for a number of more than
//! 16 digits). Every check runs before the first change, as in the scripts:
//! a refused call changes nothing. The scripts' next check, of the types of
//! the keys they write (`emq_types`, refused with `WRONGTYPE`), has no
//! counterpart here: the model's state holds no foreign key.

/// The largest duration or time the scripts accept, in milliseconds
/// (`EMQ_MAX_MS` in the prelude): deadlines stay exact in a Lua double.
pub const MS_MAX: u64 = 1_000_000_000_000_000;

/// The largest `max_attempts` enqueue accepts (the smallest is 1).
pub const MAX_ATTEMPTS_MAX: u64 = 1_000_000;

/// The largest `limit` reap accepts (the smallest is 1).
pub const REAP_LIMIT_MAX: u64 = 100_000;

/// The most jobs one batch script takes or settles (`EMQ_BATCH_MAX` in the
/// prelude; the smallest batch is 1).
pub const BATCH_MAX: u64 = 1_000;

/// The longest job id, in bytes.
pub const ID_BYTES_MAX: usize = 512;

/// The longest worker name, in bytes (the shortest is 1).
pub const WORKER_BYTES_MAX: usize = 256;

/// A call the scripts refuse before any write; the model changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    /// The error's code, the first word of the script's error reply:
    /// `EMQKIND` (the id lacks the `JOB` brand) or `EMQARG` (an argument out
    /// of range). This is what the refinement check compares.
    pub code: &'static str,
    /// The script's whole error text, code first, e.g.
    /// `EMQARG lease_ms must be in [1, 1000000000000000], got 0`, as the
    /// client receives it (Valkey replaces CR and LF in an error with
    /// spaces). For humans and for logs; the refinement check compares
    /// `code`.
    pub message: String,
}

/// `emq_id`: the `JOB` brand first (EMQKIND), then the length (EMQARG).
/// The prelude's third check, that the id is UTF-8 (EMQARG), cannot fail
/// for a `&str`: the model takes exactly the ids the scripts accept.
pub(super) fn id(id: &str) -> Result<(), ModelError> {
    if !id.as_bytes().starts_with(b"JOB") {
        return Err(refuse_kind(id));
    }
    if id.len() > ID_BYTES_MAX {
        return Err(refuse_arg(format_args!(
            "job id is longer than {ID_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// `emq_worker`: 1 to 256 bytes.
pub(super) fn worker(worker: &str) -> Result<(), ModelError> {
    if worker.is_empty() || worker.len() > WORKER_BYTES_MAX {
        return Err(refuse_arg(format_args!(
            "worker must be 1 to {WORKER_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// `emq_int(v, name, min, max)` for a value the client would send as its
/// decimal digits.
#[inline]
pub(super) fn int(name: &str, v: u64, min: u64, max: u64) -> Result<(), ModelError> {
    if (min..=max).contains(&v) {
        Ok(())
    } else {
        Err(refuse_int(name, v, min, max))
    }
}

#[cold]
#[inline(never)]
fn refuse_int(name: &str, v: u64, min: u64, max: u64) -> ModelError {
    // The prelude refuses more than 16 characters as "not an integer" before
    // it looks at the range; a u64 of 17 or more digits takes that branch.
    let digits = v.to_string();
    if digits.len() > 16 {
        refuse_arg(format_args!(
            "{name} must be an integer, got {}",
            show(digits.as_bytes())
        ))
    } else {
        refuse_arg(format_args!(
            "{name} must be in [{min}, {max}], got {digits}"
        ))
    }
}

#[cold]
#[inline(never)]
fn refuse_arg(text: std::fmt::Arguments<'_>) -> ModelError {
    ModelError {
        code: "EMQARG",
        message: format!("EMQARG {text}"),
    }
}

#[cold]
#[inline(never)]
fn refuse_kind(id: &str) -> ModelError {
    let message = format!(
        "EMQKIND job id must be JOB-namespaced, got {}",
        show(id.as_bytes())
    );
    ModelError {
        code: "EMQKIND",
        message,
    }
}

/// The prelude's `emq_show`: `v` in double quotes, `"` and `\` escaped by a
/// backslash, every byte outside printable ASCII as `\ddd` (decimal), and at
/// most its first 64 bytes, then `...`. So an error never carries raw
/// binary (which a client may fail to parse) or a huge argument.
fn show(v: &[u8]) -> String {
    let (shown, more) = if v.len() > 64 {
        (&v[..64], "...")
    } else {
        (v, "")
    };
    let mut out = String::with_capacity(shown.len() + 5);
    out.push('"');
    for &b in shown {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(b));
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\{b:03}")),
        }
    }
    out.push('"');
    out.push_str(more);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_escapes_quotes_and_every_byte_outside_printable_ascii() {
        assert_eq!(
            show("a\"b\\c\nd\re\0f".as_bytes()),
            r#""a\"b\\c\010d\013e\000f""#
        );
        assert_eq!(show("ñ\t".as_bytes()), r#""\195\177\009""#);
        assert_eq!(show(b"x"), r#""x""#);
    }

    #[test]
    fn show_cuts_a_long_value_after_64_bytes() {
        let long = "x".repeat(65);
        assert_eq!(show(long.as_bytes()), format!("\"{}\"...", &long[..64]));
        assert_eq!(show(&long.as_bytes()[..64]), format!("\"{}\"", &long[..64]));
    }

    #[test]
    fn a_refused_id_is_shown_escaped_on_one_line() {
        assert_eq!(
            id("j\"o\\b\n\r\0x").unwrap_err().message,
            r#"EMQKIND job id must be JOB-namespaced, got "j\"o\\b\010\013\000x""#
        );
    }

    #[test]
    fn a_number_of_more_than_16_digits_is_refused_as_not_an_integer() {
        let e = int("token", u64::MAX, 1, MS_MAX).unwrap_err();
        assert_eq!(
            e.message,
            "EMQARG token must be an integer, got \"18446744073709551615\""
        );
        let e = int("token", 10_000_000_000_000_000, 1, MS_MAX).unwrap_err();
        assert!(e.message.contains("must be an integer"), "{e}");
        let e = int("token", 9_999_999_999_999_999, 1, MS_MAX).unwrap_err();
        assert_eq!(
            e.message,
            "EMQARG token must be in [1, 1000000000000000], got 9999999999999999"
        );
    }

    #[test]
    fn range_bounds_are_inclusive() {
        assert!(int("x", 1, 1, 3).is_ok());
        assert!(int("x", 3, 1, 3).is_ok());
        assert_eq!(int("x", 0, 1, 3).unwrap_err().code, "EMQARG");
        assert_eq!(int("x", 4, 1, 3).unwrap_err().code, "EMQARG");
    }

    #[test]
    fn the_brand_is_checked_before_the_length() {
        let long_unbranded = "X".repeat(600);
        assert_eq!(id(&long_unbranded).unwrap_err().code, "EMQKIND");
        let long_branded = format!("JOB{}", "x".repeat(510));
        assert_eq!(long_branded.len(), 513);
        assert_eq!(
            id(&long_branded).unwrap_err().message,
            "EMQARG job id is longer than 512 bytes"
        );
        assert!(id(&long_branded[..512]).is_ok());
        assert!(id("JOB").is_ok());
        assert_eq!(id("job-1").unwrap_err().code, "EMQKIND");
        assert_eq!(id("").unwrap_err().code, "EMQKIND");
    }

    #[test]
    fn a_worker_name_is_1_to_256_bytes() {
        assert!(worker("w").is_ok());
        assert!(worker(&"w".repeat(256)).is_ok());
        assert_eq!(
            worker("").unwrap_err().message,
            "EMQARG worker must be 1 to 256 bytes"
        );
        assert_eq!(worker(&"w".repeat(257)).unwrap_err().code, "EMQARG");
    }
}
