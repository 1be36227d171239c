//! Cluster tests of membership changes.

mod t50_membership;
