//! Tests against the real 2x H200 host snapshot.
