//! SigV4 verification end to end: the official SDK's real signatures are
//! accepted, wrong secrets, unknown keys and unsigned requests are refused.

mod common;

use common::{TestServer, code_of, sdk_client_as};
use leaseq_server::Credentials;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_requests_pass_and_bad_ones_are_refused() {
    let server = TestServer::signed(Credentials::new([("AKIDLEASEQ", "s3cret/with+chars")])).await;
    let good = sdk_client_as(server.addr, "AKIDLEASEQ", "s3cret/with+chars");
    let url = good.create_queue().queue_name("signed").send().await.unwrap().queue_url.unwrap();
    good.send_message().queue_url(&url).message_body("signed body ✓\nline 2").send().await.unwrap();
    let got = good.receive_message().queue_url(&url).wait_time_seconds(2).send().await.unwrap();
    let m = &got.messages()[0];
    assert_eq!(m.body(), Some("signed body ✓\nline 2"));
    good.delete_message().queue_url(&url).receipt_handle(m.receipt_handle().unwrap()).send().await.unwrap();

    let wrong_secret = sdk_client_as(server.addr, "AKIDLEASEQ", "guess");
    let err = wrong_secret.list_queues().send().await.unwrap_err();
    assert_eq!(code_of(&err), "SignatureDoesNotMatch");
    assert_eq!(err.raw_response().unwrap().status().as_u16(), 403);

    let unknown = sdk_client_as(server.addr, "AKIDOTHER", "s3cret/with+chars");
    let err = unknown.list_queues().send().await.unwrap_err();
    assert_eq!(code_of(&err), "InvalidClientTokenId");

    let unsigned = server.raw(Some("AmazonSQS.ListQueues"), "application/x-amz-json-1.0", b"{}").await;
    assert_eq!(unsigned.status, 403);
    assert_eq!(unsigned.json["__type"], "com.amazonaws.sqs#MissingAuthenticationToken");

    // Nothing the refused clients asked for happened.
    let queues = good.list_queues().send().await.unwrap();
    assert_eq!(queues.queue_urls(), std::slice::from_ref(&url));
    server.stop().await;
}
