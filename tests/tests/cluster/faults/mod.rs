//! Cluster tests of the fault suite.

mod t90_nemesis;
