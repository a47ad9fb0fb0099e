//! Stop strings: generation ends before the first occurrence of any of them,
//! and streamed text never shows a stop string or a prefix of one that later
//! completes. Text that could still turn into a stop string is held back.

/// Tracks generated text against a set of stop strings.
#[derive(Debug)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// All text generated so far (after UTF-8 decoding).
    text: String,
    /// How much of `text` has been released to the caller.
    released: usize,
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
        }
    }

    /// Adds generated text and checks for a stop string.
    pub fn push(&mut self, piece: &str) -> StopState {
        if piece.is_empty() {
            return StopState::Continue;
        }
        // A match can only start where its tail overlaps the new piece.
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let search_from = floor_char_boundary(&self.text, self.text.len().saturating_sub(longest));
        self.text.push_str(piece);
        let first_match = self
            .stops
            .iter()
            .filter_map(|stop| self.text[search_from..].find(stop.as_str()))
            .min();
        match first_match {
            Some(at) => {
                self.text.truncate(search_from + at);
                self.released = self.released.min(self.text.len());
                StopState::Stopped
            }
            None => StopState::Continue,
        }
    }

    /// Text that is now safe to show: it cannot become part of a stop string.
    pub fn releasable(&mut self) -> &str {
        let held = self
            .stops
            .iter()
            .map(|stop| longest_suffix_that_prefixes(&self.text[self.released..], stop))
            .max()
            .unwrap_or(0);
        let end = self.text.len() - held;
        let start = self.released;
        self.released = end;
        &self.text[start..end]
    }

    /// Releases whatever is left (the generation ended).
    pub fn release_rest(&mut self) -> &str {
        let start = self.released;
        self.released = self.text.len();
        &self.text[start..]
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
}
