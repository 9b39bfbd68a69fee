//! Stop strings on streamed text: text that could be the start of a stop string is held back
//! until the next pieces show whether it is; a match cuts the text exactly before the stop string.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCheck {
    /// No stop string yet; this text can go to the client.
    Emit(String),
    /// A stop string matched: this is the text before it, and generation ends.
    Stopped(String),
}

#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    /// Empty stop strings are ignored (they would match before any text).
    pub fn new(stops: &[String]) -> StopMatcher {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
        }
    }

    /// Takes the next piece of text and says what may be emitted.
    pub fn push(&mut self, piece: &str) -> StopCheck {
        if self.stops.is_empty() {
            return StopCheck::Emit(piece.to_string());
        }
        self.held.push_str(piece);
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let mut text = std::mem::take(&mut self.held);
            text.truncate(at);
            return StopCheck::Stopped(text);
        }
        let keep = self.longest_stop_prefix_suffix();
        let text = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        StopCheck::Emit(text)
    }

    /// Releases what was held back, at the end of generation for another reason.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length of the longest end of the held text that begins some stop string.
    fn longest_stop_prefix_suffix(&self) -> usize {
        let held = self.held.as_str();
        self.stops
            .iter()
            .filter_map(|s| {
                (1..s.len().min(held.len() + 1))
                    .rev()
                    .find(|&k| s.is_char_boundary(k) && held.ends_with(&s[..k]))
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(stops: &[&str]) -> StopMatcher {
        StopMatcher::new(&stops.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn emit(s: &str) -> StopCheck {
        StopCheck::Emit(s.to_string())
    }

    #[test]
    fn without_stop_strings_everything_passes_through() {
        let mut m = matcher(&[""]);
        assert_eq!(m.push("a b"), emit("a b"));
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn a_stop_string_inside_one_piece_cuts_it() {
        let mut m = matcher(&["END"]);
        assert_eq!(m.push("abc END def"), StopCheck::Stopped("abc ".into()));
    }

    #[test]
    fn a_stop_string_split_over_pieces_is_held_then_cut() {
        let mut m = matcher(&["\n\nUser:"]);
        assert_eq!(m.push("Hello"), emit("Hello"));
        assert_eq!(m.push(" there\n"), emit(" there"));
        assert_eq!(m.push("\nUs"), emit(""));
        assert_eq!(m.push("er:"), StopCheck::Stopped("".into()));
    }

    #[test]
    fn a_false_start_is_released_when_it_stops_matching() {
        let mut m = matcher(&["STOP"]);
        assert_eq!(m.push("ST"), emit(""));
        assert_eq!(m.push("OP?"), StopCheck::Stopped("".into()));
        let mut m = matcher(&["STOP"]);
        assert_eq!(m.push("xST"), emit("x"));
        assert_eq!(m.push("ART"), emit("START"));
        assert_eq!(m.push("S"), emit(""));
        assert_eq!(m.finish(), "S");
    }

    #[test]
    fn the_earliest_of_several_stop_strings_wins() {
        let mut m = matcher(&["world", "lo w"]);
        assert_eq!(m.push("hello world"), StopCheck::Stopped("hel".into()));
    }

    #[test]
    fn multibyte_stop_strings_are_held_at_character_boundaries() {
        let mut m = matcher(&["日本語"]);
        assert_eq!(m.push("これは日"), emit("これは"));
        assert_eq!(m.push("本"), emit(""));
        assert_eq!(m.push("人"), emit("日本人"));
        assert_eq!(m.push("日本語です"), StopCheck::Stopped("".into()));
    }
}
