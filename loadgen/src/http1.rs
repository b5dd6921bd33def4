//! A minimal HTTP/1.1 keep-alive client for the SQS JSON protocol: one
//! request at a time on one TCP connection, `Content-Length` or chunked
//! responses, reconnecting when the server closes the connection.
//!
//! Why not the AWS SDK or hyper's client: the benchmark shares two cores
//! between client and server, so every microsecond the client spends is taken
//! from the server. The SDK signs, retries and builds a request pipeline per
//! call; this client writes one buffer and parses one header block, the same
//! for leaseq-server and moto.

use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::error::LoadError;

/// One keep-alive connection.
#[derive(Debug)]
pub(crate) struct HttpConnection {
    address: SocketAddr,
    stream: Option<BufReader<TcpStream>>,
    request: Vec<u8>,
    line: String,
    /// Connections opened after the first (the server closed one).
    pub(crate) reconnects: u64,
}

/// A response's status and body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

impl HttpConnection {
    pub(crate) async fn open(address: SocketAddr) -> Result<Self, LoadError> {
        let mut connection =
            HttpConnection { address, stream: None, request: Vec::new(), line: String::new(), reconnects: 0 };
        connection.stream = Some(connection.dial().await?);
        connection.reconnects = 0;
        Ok(connection)
    }

    async fn dial(&mut self) -> Result<BufReader<TcpStream>, LoadError> {
        let stream = TcpStream::connect(self.address)
            .await
            .map_err(|e| LoadError::new(format!("cannot connect to {}: {e}", self.address)))?;
        stream.set_nodelay(true)?;
        self.reconnects += 1;
        Ok(BufReader::with_capacity(64 * 1024, stream))
    }

    /// POSTs an SQS JSON request for `action` and reads the whole response.
    pub(crate) async fn post_sqs(&mut self, action: &str, body: &[u8]) -> Result<Response, LoadError> {
        self.request.clear();
        self.request.extend_from_slice(b"POST / HTTP/1.1\r\nHost: ");
        self.request.extend_from_slice(self.address.to_string().as_bytes());
        self.request.extend_from_slice(b"\r\nContent-Type: application/x-amz-json-1.0\r\nX-Amz-Target: AmazonSQS.");
        self.request.extend_from_slice(action.as_bytes());
        self.request.extend_from_slice(
            b"\r\nAuthorization: AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/sqs/aws4_request, \
              SignedHeaders=host, Signature=0\r\nContent-Length: ",
        );
        self.request.extend_from_slice(body.len().to_string().as_bytes());
        self.request.extend_from_slice(b"\r\n\r\n");
        self.request.extend_from_slice(body);
        // A kept-alive connection the server closed while idle fails on first
        // use: retry once on a fresh one.
        match self.exchange().await {
            Ok(response) => Ok(response),
            Err(_) if self.stream.is_none() => {
                self.stream = Some(self.dial().await?);
                self.exchange().await
            }
            Err(e) => Err(e),
        }
    }

    async fn exchange(&mut self) -> Result<Response, LoadError> {
        let Some(mut stream) = self.stream.take() else {
            return Err(LoadError::new("no connection"));
        };
        stream.get_mut().write_all(&self.request).await?;
        let (response, keep_alive) = read_response(&mut stream, &mut self.line).await?;
        if keep_alive {
            self.stream = Some(stream);
        } else {
            self.stream = Some(self.dial().await?);
        }
        Ok(response)
    }
}

async fn read_response(stream: &mut BufReader<TcpStream>, line: &mut String) -> Result<(Response, bool), LoadError> {
    line.clear();
    if stream.read_line(line).await? == 0 {
        return Err(LoadError::new("the server closed the connection"));
    }
    let mut parts = line.split_whitespace();
    let version = parts.next().unwrap_or_default().to_string();
    let status: u16 =
        parts.next().and_then(|s| s.parse().ok()).ok_or_else(|| LoadError::new(format!("bad status line {line:?}")))?;
    let mut keep_alive = version == "HTTP/1.1";
    let mut length = None;
    let mut chunked = false;
    loop {
        line.clear();
        if stream.read_line(line).await? == 0 {
            return Err(LoadError::new("the server closed the connection in the headers"));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            keep_alive =
                value.eq_ignore_ascii_case("keep-alive") || (keep_alive && !value.eq_ignore_ascii_case("close"));
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            stream.read_line(line).await?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(|_| LoadError::new(format!("bad chunk size {line:?}")))?;
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk).await?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = length {
        body.resize(length, 0);
        stream.read_exact(&mut body).await?;
    } else {
        stream.read_to_end(&mut body).await?;
        keep_alive = false;
    }
    Ok((Response { status, body }, keep_alive))
}
