//! [`NoDuplex`]: the halves of a session that does not split ([`super::Session::split`] answers
//! `None`), so that such a session still names its half types.

use std::time::Duration;

use edge_core::{
    buf::RecvBuf,
    http::{
        framing::Body,
        head::{Field, ResponseHead},
        view::ResponseView,
    },
    io::body::{BodySource, RequestSink, SendBodyError},
};

use super::{BodyFailure, RelayError, Respond, Started};
use crate::respond::SendFailure;

/// A half of a session that never splits: uninhabited, no value is ever made.
#[derive(Debug)]
pub enum NoDuplex {}

impl BodySource for NoDuplex {
    type Error = BodyFailure;

    async fn forward_rest<W: RequestSink>(
        &mut self,
        _: &mut W,
        _: Duration,
    ) -> Result<(), SendBodyError<BodyFailure>> {
        match *self {}
    }
}

impl Respond for NoDuplex {
    async fn send_interim(&mut self, _: &ResponseView<'_>) -> Result<(), SendFailure> {
        match *self {}
    }

    async fn send_continue(&mut self) -> Result<(), SendFailure> {
        match *self {}
    }

    async fn send_switching(&mut self, _: &ResponseView<'_>) -> Result<(), SendFailure> {
        match *self {}
    }

    async fn send_head(
        &mut self,
        _: &ResponseHead,
        _: &[Field],
        _: Body,
        _: bool,
        _: &mut RecvBuf,
    ) -> Result<Started, RelayError> {
        match *self {}
    }

    fn passthrough(&self) -> bool {
        match *self {}
    }

    async fn send_body(&mut self, _: &mut RecvBuf) -> Result<bool, RelayError> {
        match *self {}
    }

    async fn end_body(&mut self) -> Result<(), SendFailure> {
        match *self {}
    }
}
