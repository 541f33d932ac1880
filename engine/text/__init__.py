"""From raw text to tagged words: tokenizer, part-of-speech tagger, jackknifing."""
