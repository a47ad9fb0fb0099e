//! The local lane: a llama.cpp model on a dedicated worker thread.
