//! Streaming UTF-8: token pieces are bytes, and a character may span several
//! tokens. The decoder holds an incomplete trailing sequence until the next
//! piece completes it; bytes that can never be valid become U+FFFD.

/// Turns a stream of byte pieces into valid UTF-8 text.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Feeds `bytes`; appends the text that is now complete to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut String) {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(text) => {
                    out.push_str(text);
                    start = self.pending.len();
                    break;
                }
                Err(err) => {
                    let valid_end = start + err.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[start..valid_end])
                            .expect("from_utf8 said these bytes are valid"),
                    );
                    match err.error_len() {
                        // Invalid bytes: replace them and go on.
                        Some(len) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start = valid_end + len;
                        }
                        // An incomplete sequence at the end: wait for more.
                        None => {
                            start = valid_end;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
    }

    /// Ends the stream: an incomplete trailing sequence becomes U+FFFD.
    pub fn finish(&mut self, out: &mut String) {
        if !self.pending.is_empty() {
            self.pending.clear();
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Stream;

    fn feed_bytes_one_at_a_time(bytes: &[u8]) -> String {
        let mut stream = Utf8Stream::default();
        let mut out = String::new();
        for b in bytes {
            stream.push(std::slice::from_ref(b), &mut out);
        }
        stream.finish(&mut out);
        out
    }

    #[test]
    fn multibyte_characters_split_across_pieces_come_out_whole() {
        let text = "héllo 世界 🎉 done";
        assert_eq!(feed_bytes_one_at_a_time(text.as_bytes()), text);
    }

    #[test]
    fn every_emitted_chunk_is_valid_and_incomplete_bytes_are_held() {
        let mut stream = Utf8Stream::default();
        let mut out = String::new();
        let emoji = "🎉".as_bytes();
        stream.push(&emoji[..2], &mut out);
        assert_eq!(out, "", "half an emoji must be held back");
        stream.push(&emoji[2..], &mut out);
        assert_eq!(out, "🎉");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        assert_eq!(feed_bytes_one_at_a_time(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(feed_bytes_one_at_a_time(b"a\xe4\xb8"), "a\u{fffd}");
    }
}
