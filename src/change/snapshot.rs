//! (filled in by the change pipeline work)
