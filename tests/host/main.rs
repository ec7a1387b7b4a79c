//! Host integration tests (root).
