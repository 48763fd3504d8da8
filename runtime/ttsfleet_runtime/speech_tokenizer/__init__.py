"""The speech tokenizers: codes to audio (and a recording to codes), one subpackage per
frame rate."""
