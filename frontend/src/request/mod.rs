//! Admission (DESIGN.md "Request pipeline and traffic rules"), written once for every protocol.

pub mod route;
