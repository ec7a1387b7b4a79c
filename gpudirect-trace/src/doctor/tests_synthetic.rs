//! Synthetic trees.
