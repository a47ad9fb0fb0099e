//! An incremental server-sent-events decoder (the WHATWG event-stream
//! format): bytes in, events out, whatever the split between network
//! reads. It caps line and event size and checks UTF-8; it knows nothing of
//! chat completions or `[DONE]`, and does no I/O.

use std::mem;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field, if the server named the event.
    pub(crate) event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub(crate) data: String,
}

/// Why the byte stream is not acceptable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SseError {
    /// A line, or one event's data, grew past the cap.
    LineTooLong,
    /// A field line is not UTF-8.
    InvalidUtf8,
}

/// Decoder state carried between network reads.
#[derive(Debug)]
pub(crate) struct SseDecoder {
    max_line: usize,
    /// The current, unterminated line.
    line: Vec<u8>,
    /// The current event's data so far.
    data: String,
    has_data: bool,
    event: Option<String>,
    /// The previous byte was `\r`: a `\n` right after it ends nothing more.
    after_cr: bool,
    /// Bytes of a possible leading byte-order mark seen so far.
    bom_seen: usize,
    started: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseDecoder {
    /// A decoder refusing lines (and event data) longer than `max_line` bytes.
    pub(crate) fn new(max_line: usize) -> Self {
        Self {
            max_line,
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            event: None,
            after_cr: false,
            bom_seen: 0,
            started: false,
        }
    }

    /// Feeds bytes; completed events are appended to `out`.
    pub(crate) fn push(
        &mut self,
        mut bytes: &[u8],
        out: &mut Vec<SseEvent>,
    ) -> Result<(), SseError> {
        // The stream may open with a UTF-8 byte-order mark, itself possibly
        // split across reads; it is not part of the first line.
        while !self.started && !bytes.is_empty() {
            if bytes[0] == BOM[self.bom_seen] {
                self.bom_seen += 1;
                bytes = &bytes[1..];
                if self.bom_seen == BOM.len() {
                    self.started = true;
                }
            } else {
                self.started = true;
                let partial = BOM[..self.bom_seen].to_vec();
                self.consume(&partial, out)?;
            }
        }
        self.consume(bytes, out)
    }

    fn consume(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(i) => {
                    if self.line.len() + i > self.max_line {
                        return Err(SseError::LineTooLong);
                    }
                    self.line.extend_from_slice(&bytes[..i]);
                    self.after_cr = bytes[i] == b'\r';
                    bytes = &bytes[i + 1..];
                    let line = mem::take(&mut self.line);
                    self.line_done(&line, out)?;
                    // Keep the allocation for the next line.
                    self.line = line;
                    self.line.clear();
                }
                None => {
                    if self.line.len() + bytes.len() > self.max_line {
                        return Err(SseError::LineTooLong);
                    }
                    self.line.extend_from_slice(bytes);
                    break;
                }
            }
        }
        Ok(())
    }

    /// The byte stream ended. An unterminated last line is dropped (it was
    /// cut); an event whose lines all arrived but whose closing blank line
    /// did not is still dispatched, because some servers close right after
    /// their last `data:` line.
    pub(crate) fn finish(&mut self, out: &mut Vec<SseEvent>) {
        self.line.clear();
        self.dispatch(out);
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // a comment: keep-alive padding
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::InvalidUtf8)?;
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match field {
            "data" => {
                let extra = usize::from(self.has_data) + value.len();
                if self.data.len() + extra > self.max_line {
                    return Err(SseError::LineTooLong);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            _ => {} // id, retry and unknown fields mean nothing to us
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if mem::take(&mut self.has_data) {
            out.push(SseEvent {
                event,
                data: mem::take(&mut self.data),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: data.to_owned(),
        }
    }

    fn decode_in(parts: &[&[u8]], max: usize) -> Result<Vec<SseEvent>, SseError> {
        let mut d = SseDecoder::new(max);
        let mut out = Vec::new();
        for p in parts {
            d.push(p, &mut out)?;
        }
        d.finish(&mut out);
        Ok(out)
    }

    /// A stream in the shapes the servers send: role-only first delta,
    /// comments, keep-alive blank lines, CRLF and bare CR line ends, `data:`
    /// without a space, a multi-byte character, a named event, the usage
    /// chunk and `[DONE]`.
    const STREAM: &[u8] = b"\xEF\xBB\xBF: hello\n\n\
data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
\n\n\
data:{\"choices\":[{\"delta\":{\"content\":\"h\xC3\xA9\"}}]}\r\n\r\n\
: keep-alive\r\r\
id: 7\nretry: 10\ndata: line1\ndata: line2\n\n\
event: error\ndata: {\"error\":\"x\"}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n\
data: [DONE]\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            ev("{\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}"),
            ev("{\"choices\":[{\"delta\":{\"content\":\"hé\"}}]}"),
            ev("line1\nline2"),
            SseEvent {
                event: Some("error".into()),
                data: "{\"error\":\"x\"}".into(),
            },
            ev("{\"choices\":[],\"usage\":{\"prompt_tokens\":1}}"),
            ev("[DONE]"),
        ]
    }

    #[test]
    fn whole_stream_at_once() {
        assert_eq!(decode_in(&[STREAM], 1024).unwrap(), expected());
    }

    #[test]
    fn one_byte_at_a_time() {
        let parts: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(decode_in(&parts, 1024).unwrap(), expected());
    }

    #[test]
    fn split_at_every_byte_boundary() {
        for i in 0..=STREAM.len() {
            let (a, b) = STREAM.split_at(i);
            assert_eq!(
                decode_in(&[a, b], 1024).unwrap(),
                expected(),
                "split at {i}"
            );
        }
    }

    #[test]
    fn line_cap_holds_across_reads() {
        let long = vec![b'x'; 40];
        assert_eq!(
            decode_in(&[b"data: ", &long], 32),
            Err(SseError::LineTooLong)
        );
        let parts: Vec<&[u8]> = long.chunks(1).collect();
        assert_eq!(decode_in(&parts, 32), Err(SseError::LineTooLong));
        // Many short data lines in one event are capped too.
        let many = b"data: 0123456789\n".repeat(4);
        assert_eq!(decode_in(&[&many], 32), Err(SseError::LineTooLong));
        // Comments are lines like any other.
        assert_eq!(
            decode_in(&[b": ", &long, b"\n"], 32),
            Err(SseError::LineTooLong)
        );
        // Exactly at the cap is fine.
        let at_cap = format!("data: {}\n\n", "y".repeat(26));
        assert_eq!(decode_in(&[at_cap.as_bytes()], 32).unwrap().len(), 1);
    }

    #[test]
    fn invalid_utf8_is_refused() {
        assert_eq!(
            decode_in(&[b"data: \xFF\xFE\n\n"], 64),
            Err(SseError::InvalidUtf8)
        );
    }

    #[test]
    fn end_of_stream() {
        // Complete lines without the closing blank line: dispatched.
        assert_eq!(decode_in(&[b"data: a\n"], 64).unwrap(), vec![ev("a")]);
        // A cut line: dropped.
        assert_eq!(
            decode_in(&[b"data: a\n\ndata: {\"cho"], 64).unwrap(),
            vec![ev("a")]
        );
        // Events without data are not dispatched.
        assert!(decode_in(&[b"event: ping\n\n: x\n\n"], 64)
            .unwrap()
            .is_empty());
    }
}
