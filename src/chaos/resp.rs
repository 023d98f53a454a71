//! A RESP frame splitter: just enough of the Redis protocol for the fault
//! proxy to cut a byte stream into whole frames (so it can drop, delay or
//! duplicate one request or one reply) and to name a request's command.
//!
//! It does not decode values; it only finds where each frame ends. RESP2
//! and the RESP3 types are both understood, so a client that says `HELLO 3`
//! does not confuse it.

/// Why a byte stream is not RESP.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not RESP at byte {at}: {why}")]
pub(crate) struct RespError {
    /// The offset of the offending byte in the buffer.
    pub at: usize,
    /// What was wrong.
    pub why: &'static str,
}

/// The largest aggregate or bulk length accepted; anything larger is taken
/// for garbage rather than buffered.
pub(crate) const LENGTH_MAX: i64 = 512 * 1024 * 1024;

/// The length in bytes of the first complete frame of `buf`, `Ok(None)` if
/// `buf` holds only the beginning of one, or an error if it is not RESP.
pub(crate) fn frame_len(buf: &[u8]) -> Result<Option<usize>, RespError> {
    let mut pending: u64 = 1;
    let mut at = 0;
    while pending > 0 {
        pending -= 1;
        let Some(&kind) = buf.get(at) else {
            return Ok(None);
        };
        let Some(line_end) = find_crlf(buf, at + 1) else {
            return Ok(None);
        };
        let line = &buf[at + 1..line_end];
        let next = line_end + 2;
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => at = next,
            b'$' | b'!' | b'=' => {
                let n = number(line, at)?;
                if n < 0 {
                    at = next;
                    continue;
                }
                let end = next + n as usize + 2;
                if buf.len() < end {
                    return Ok(None);
                }
                if &buf[end - 2..end] != b"\r\n" {
                    return Err(RespError {
                        at: end - 2,
                        why: "a bulk string does not end with CRLF",
                    });
                }
                at = end;
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n = number(line, at)?;
                at = next;
                if n > 0 {
                    let items = if matches!(kind, b'%' | b'|') {
                        2 * n
                    } else {
                        n
                    };
                    pending += items as u64;
                }
            }
            _ => {
                return Err(RespError {
                    at,
                    why: "unknown type byte",
                })
            }
        }
    }
    Ok(Some(at))
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

fn number(line: &[u8], at: usize) -> Result<i64, RespError> {
    let n: i64 = std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(RespError {
            at,
            why: "a length is not a number",
        })?;
    if n > LENGTH_MAX {
        return Err(RespError {
            at,
            why: "a length is larger than 512 MiB",
        });
    }
    Ok(n)
}

/// The command of a request frame (its first bulk string, upper-cased),
/// or `None` if the frame is not an array of bulk strings.
pub fn command(frame: &[u8]) -> Option<String> {
    if frame.first() != Some(&b'*') {
        return None;
    }
    let first = find_crlf(frame, 1)? + 2;
    if frame.get(first) != Some(&b'$') {
        return None;
    }
    let len_end = find_crlf(frame, first + 1)?;
    let n: usize = std::str::from_utf8(&frame[first + 1..len_end])
        .ok()?
        .parse()
        .ok()?;
    let name = frame.get(len_end + 2..len_end + 2 + n)?;
    Some(String::from_utf8_lossy(name).to_ascii_uppercase())
}

/// Splits every complete frame off the front of `buf`, leaving a partial
/// one in place.
pub(crate) fn split_frames(buf: &mut Vec<u8>) -> Result<Vec<Vec<u8>>, RespError> {
    let mut frames = Vec::new();
    let mut start = 0;
    while let Some(n) = frame_len(&buf[start..])? {
        frames.push(buf[start..start + n].to_vec());
        start += n;
    }
    buf.drain(..start);
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_array_is_one_frame_and_names_its_command() {
        let req = b"*3\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n0\r\n";
        assert_eq!(frame_len(req), Ok(Some(req.len())));
        assert_eq!(command(req).as_deref(), Some("EVALSHA"));
    }

    #[test]
    fn every_prefix_of_a_frame_is_incomplete_not_an_error() {
        let reply = b"*2\r\n$-1\r\n*2\r\n:1\r\n+OK\r\n";
        for n in 0..reply.len() {
            assert_eq!(frame_len(&reply[..n]), Ok(None), "prefix {n}");
        }
        assert_eq!(frame_len(reply), Ok(Some(reply.len())));
    }

    #[test]
    fn pipelined_frames_split_apart_and_keep_the_tail() {
        let mut buf = b"+OK\r\n-ERR no\r\n$3\r\nabc\r\n%1\r\n+a\r\n:1\r\n$5\r\nab".to_vec();
        let frames = split_frames(&mut buf).unwrap();
        assert_eq!(frames.len(), 4);
        assert_eq!(frames[2], b"$3\r\nabc\r\n");
        assert_eq!(buf, b"$5\r\nab");
    }

    #[test]
    fn garbage_is_an_error_with_its_offset() {
        assert_eq!(
            frame_len(b"+OK\r\n").and_then(|_| frame_len(b"?x\r\n")),
            Err(RespError {
                at: 0,
                why: "unknown type byte"
            })
        );
        assert!(frame_len(b"$3\r\nabcde\r\n").is_err());
    }
}
