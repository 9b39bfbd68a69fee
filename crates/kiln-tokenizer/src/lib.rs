//! Text to token ids and back, for every vocabulary kind kiln loads, plus chat templates.
