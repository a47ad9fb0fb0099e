//! Stop strings: generation ends before the first occurrence of any of them,
//! and streamed text never shows a stop string or a prefix of one that later
//! completes. Text that could still turn into a stop string is held back.
//!
//! Held markers (a tool call's opening, issue 24) are the other kind: the
//! text goes on, but nothing from the first marker on is ever released to
//! the stream (it is kept, and parsed when the answer is whole).

/// Tracks generated text against a set of stop strings.
#[derive(Debug)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// All text generated so far (after UTF-8 decoding).
    text: String,
    /// How much of `text` has been released to the caller.
    released: usize,
    /// Markers from which on nothing is released.
    holds: Vec<String>,
    /// Where the first held marker starts, once one has appeared (0 when
    /// everything is held).
    held_from: Option<usize>,
    /// The stop string that matched, once one did (an index of `stops`).
    matched: Option<usize>,
}

/// What the matcher decided after new text arrived.
#[derive(Debug, PartialEq, Eq)]
pub enum StopState {
    /// Keep generating.
    Continue,
    /// A stop string matched; the text has been cut before it.
    Stopped,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            text: String::new(),
            released: 0,
            holds: Vec::new(),
            held_from: None,
            matched: None,
        }
    }

    /// The same matcher, also holding back everything from the first of
    /// `markers` on; an empty list holds back all text.
    pub fn holding(mut self, markers: Vec<String>) -> Self {
        if markers.is_empty() {
            self.held_from = Some(0);
        }
        self.holds = markers.into_iter().filter(|m| !m.is_empty()).collect();
        self
    }

    /// Adds generated text and checks for a stop string.
    pub fn push(&mut self, piece: &str) -> StopState {
        if piece.is_empty() {
            return StopState::Continue;
        }
        // A match can only start where its tail overlaps the new piece.
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let before = self.text.len();
        let search_from = floor_char_boundary(&self.text, self.text.len().saturating_sub(longest));
        self.text.push_str(piece);
        let first_match = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, stop)| Some((self.text[search_from..].find(stop.as_str())?, i)))
            .min();
        let state = match first_match {
            Some((at, i)) => {
                self.matched = Some(i);
                self.text.truncate(search_from + at);
                self.released = self.released.min(self.text.len());
                StopState::Stopped
            }
            None => StopState::Continue,
        };
        if self.held_from.is_none() && !self.holds.is_empty() {
            // As for stops: a marker can only start where it overlaps the
            // new piece.
            let longest = self.holds.iter().map(String::len).max().unwrap_or(0);
            let from = floor_char_boundary(
                &self.text,
                before.saturating_sub(longest).min(self.text.len()),
            );
            self.held_from = self
                .holds
                .iter()
                .filter_map(|h| self.text[from..].find(h.as_str()))
                .min()
                .map(|at| from + at);
        }
        state
    }

    /// The stop string that ended the text, once one did.
    pub fn matched(&self) -> Option<&str> {
        self.matched.map(|i| self.stops[i].as_str())
    }

    /// Text that is now safe to show: it cannot become part of a stop string.
    pub fn releasable(&mut self) -> &str {
        let held = self
            .stops
            .iter()
            .chain(&self.holds)
            .map(|stop| longest_suffix_that_prefixes(&self.text[self.released..], stop))
            .max()
            .unwrap_or(0);
        let end = self
            .held_from
            .map_or(self.text.len() - held, |h| h.min(self.text.len()))
            .max(self.released);
        let start = self.released;
        self.released = end;
        &self.text[start..end]
    }

    /// Releases whatever is left (the generation ended), up to a held
    /// marker.
    pub fn release_rest(&mut self) -> &str {
        let start = self.released;
        let end = self
            .held_from
            .unwrap_or(self.text.len())
            .min(self.text.len())
            .max(start);
        self.released = end;
        &self.text[start..end]
    }

    /// All the text kept (cut before a stop string that matched).
    pub fn into_text(self) -> String {
        self.text
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `stop`.
fn longest_suffix_that_prefixes(text: &str, stop: &str) -> usize {
    let max = text.len().min(stop.len().saturating_sub(1));
    (1..=max)
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n)
                && stop
                    .as_bytes()
                    .starts_with(&text.as_bytes()[text.len() - n..])
        })
        .unwrap_or(0)
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::{StopMatcher, StopState};

    fn run(stops: &[&str], pieces: &[&str]) -> (String, String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut streamed = String::new();
        let mut stopped = false;
        for p in pieces {
            let state = m.push(p);
            streamed.push_str(m.releasable());
            if state == StopState::Stopped {
                stopped = true;
                break;
            }
        }
        streamed.push_str(m.release_rest());
        (m.into_text(), streamed, stopped)
    }

    #[test]
    fn stop_string_split_across_pieces_is_never_streamed() {
        let (text, streamed, stopped) = run(&["END"], &["hello E", "N", "D tail"]);
        assert!(stopped);
        assert_eq!(text, "hello ");
        assert_eq!(streamed, "hello ");
    }

    #[test]
    fn held_prefix_is_released_when_it_does_not_complete() {
        let (text, streamed, stopped) = run(&["END"], &["a E", "x"]);
        assert!(!stopped);
        assert_eq!(text, "a Ex");
        assert_eq!(streamed, "a Ex");
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        let (text, _, stopped) = run(&["zz", "b"], &["aab", "zz"]);
        assert!(stopped);
        assert_eq!(text, "aa");
    }

    #[test]
    fn multibyte_text_near_stops_is_cut_on_char_boundaries() {
        let (text, streamed, stopped) = run(&["界!"], &["世", "界", "!"]);
        assert!(stopped);
        assert_eq!(text, "世");
        assert_eq!(streamed, "世");
    }

    #[test]
    fn held_markers_keep_the_text_but_never_stream_it() {
        let mut m = StopMatcher::new(&[]).holding(vec!["<tool_call>".into()]);
        let mut streamed = String::new();
        for p in ["Let me ", "check.<tool", "_call>{\"name\"", ": 1}"] {
            m.push(p);
            streamed.push_str(m.releasable());
        }
        streamed.push_str(m.release_rest());
        assert_eq!(streamed, "Let me check.");
        assert_eq!(m.into_text(), "Let me check.<tool_call>{\"name\": 1}");
        // A prefix that does not complete is released.
        let mut m = StopMatcher::new(&[]).holding(vec!["<tool_call>".into()]);
        m.push("a <tool");
        assert_eq!(m.releasable(), "a ");
        m.push("s>");
        assert_eq!(m.releasable(), "<tools>");
        // Everything held.
        let mut m = StopMatcher::new(&[]).holding(Vec::new());
        m.push("{\"x\": 1}");
        assert_eq!(m.releasable(), "");
        assert_eq!(m.release_rest(), "");
        assert_eq!(m.into_text(), "{\"x\": 1}");
    }
}
