//! Opening a stream to an HTTP/2 (or `auto`) upstream: the endpoint picked as for HTTP/1.1 (policy,
//! ejection, a `max_active` permit per stream), then a connection of that endpoint with room for one
//! more stream, else a new connection (one retry on another endpoint when the connect fails). With
//! `protocol = "auto"` over TLS the server's ALPN choice decides: a connection that settled on
//! HTTP/1.1 serves this request as an HTTP/1.1 exchange and then joins the endpoint's HTTP/1.1 pool.

use edge_core::config::UpstreamProtocol;

use super::{conn, session::H2Exchange};
use crate::{
    any::AnyExchange,
    h1::H1Exchange,
    permit::Permit,
    pool::Reuse,
    session::{ClientConn, Opened},
    stream::UpstreamStream,
    Upstream, UpstreamError, UpstreamErrorKind,
};

impl Upstream {
    /// A stream on a connection with room, or on a new connection, of the endpoint the policy picks
    /// ([`Reuse::Fresh`]: a new connection); see the module docs.
    ///
    /// # Errors
    /// As [`Upstream::checkout`]: the connect error of the last attempt (retry-safe), `NoEndpoint`,
    /// `QueueTimeout`; `Tls` when `protocol = "h2"` and the server did not choose h2 in ALPN.
    pub(crate) async fn open_stream(
        &self,
        reuse: Reuse,
        client: ClientConn,
        key: Option<u64>,
    ) -> Result<Opened<AnyExchange<'_>>, UpstreamError> {
        if self.endpoints.is_empty() {
            return Err(UpstreamError::new(UpstreamErrorKind::NoEndpoint));
        }
        let proxied = self.config.send_proxy_protocol.version().map(|_| client);
        let first = self.pick(None, key);
        let permit = self.permit(first).await?;
        if reuse != Reuse::Fresh {
            let conns = &self.endpoints[first].h2;
            loop {
                if let Some(c) = conns.with_room(proxied) {
                    let session =
                        AnyExchange::H2(Box::new(H2Exchange::new(self, c, first, permit)));
                    return Ok(Opened {
                        session,
                        retried: false,
                    });
                }
                // A connection being opened may have room for this stream: wait for it rather than
                // open one per stream (a burst of streams would otherwise open a connection each).
                if !conns.is_opening() {
                    break;
                }
                let limit = self.config.connect_timeout.0;
                if edge_core::clock::timeout(limit, conns.opened())
                    .await
                    .is_err()
                {
                    break;
                }
            }
            if let Some(mut c) = self.endpoints[first].pool.take(reuse, proxied) {
                // An `auto` endpoint that chose HTTP/1.1 keeps its connections in the HTTP/1.1 pool.
                c.permit = permit;
                c.endpoint = first;
                return Ok(Opened {
                    session: AnyExchange::H1(H1Exchange::new(self, c)),
                    retried: false,
                });
            }
        }
        let attempt = |i, permit| self.connect_stream(i, proxied, permit);
        // Boxed, as for an HTTP/1.1 checkout's connect ([`Upstream::checkout`]).
        let (session, retried) =
            Box::pin(self.first_or_second(first, permit, key, attempt)).await?;
        Ok(Opened { session, retried })
    }

    /// Connects to endpoint `i` and starts HTTP/2 on it, or, for `auto` when the server chose
    /// HTTP/1.1, an HTTP/1.1 exchange.
    async fn connect_stream(
        &self,
        i: usize,
        proxied: Option<ClientConn>,
        permit: Permit,
    ) -> Result<AnyExchange<'_>, UpstreamError> {
        let ep = &self.endpoints[i];
        let _opening = ep.h2.opening();
        let mut c = self.connect(i, proxied).await?;
        let h2 = match &c.stream {
            UpstreamStream::Plain(_) => self.config.protocol == UpstreamProtocol::H2,
            UpstreamStream::Tls(t) => t.with_conn(|s| s.alpn_protocol() == Some(b"h2")),
        };
        if !h2 {
            if self.config.protocol == UpstreamProtocol::H2 {
                tracing::warn!(event = "upstream.tls_failed", upstream = %self.config.name, endpoint = %ep.addr, reason = "the server did not choose h2 in ALPN", "upstream TLS handshake failed");
                return Err(UpstreamError::retry_safe(UpstreamErrorKind::Tls).at(ep.addr));
            }
            c.permit = permit;
            return Ok(AnyExchange::H1(H1Exchange::new(self, c)));
        }
        let (stream, _parts) = c.into_parts();
        let settings = conn::Settings {
            max_streams: self.config.max_streams_per_connection,
            max_inactive: self.config.max_inactive.0,
            write_timeout: self.config.write_timeout.0,
            upstream: self.config.name.as_str().into(),
            endpoint: ep.addr,
            pings: self.h2_pings.clone(),
        };
        let conn = conn::open(&ep.h2, stream, proxied, settings)
            .await
            .map_err(|e| e.at(ep.addr))?;
        Ok(AnyExchange::H2(Box::new(H2Exchange::new(
            self, conn, i, permit,
        ))))
    }
}
