"""Smoke test of leaseq-server with real boto3.

botocore 1.3x+ no longer verifies SQS's MD5 digests itself (older releases and
other SDKs do), so this test recomputes MD5OfMessageBody and
MD5OfMessageAttributes here, independently of the server, by the algorithm SQS
documents, and compares them with what the server returned.

Usage: boto3_smoke.py http://127.0.0.1:PORT [ACCESS_KEY SECRET --signed]
With --signed the server checks SigV4: the run also makes sure a client with
a wrong secret is refused. The same checks run with a botocore that speaks
SQS's JSON protocol and with one from before it, which speaks the query
protocol (form requests, XML answers); EXPECT_PROTOCOL, if set, names the
one the installed botocore must use.
"""

import json
import sys
import time

import hashlib
import struct

import os

import boto3
import botocore.exceptions


def body_md5(body):
    return hashlib.md5(body.encode("utf-8")).hexdigest()


def attributes_md5(attributes):
    """SQS's digest: names sorted; length-prefixed name, type, transport byte, value."""
    out = b""
    for name in sorted(attributes):
        attr = attributes[name]
        for field in (name.encode(), attr["DataType"].encode()):
            out += struct.pack(">I", len(field)) + field
        if "StringValue" in attr:
            value = attr["StringValue"].encode()
            out += b"\x01"
        else:
            value = attr["BinaryValue"]
            out += b"\x02"
        out += struct.pack(">I", len(value)) + value
    return hashlib.md5(out).hexdigest()


endpoint = sys.argv[1]
key, secret = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else ("test", "test")
signed = "--signed" in sys.argv[4:]


def client(secret_key):
    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret_key,
    )


sqs = client(secret)
checks = 0
protocol = sqs.meta.service_model.protocol
expected = os.environ.get("EXPECT_PROTOCOL")
if expected and protocol != expected:
    raise AssertionError(f"botocore {botocore.__version__} speaks {protocol} to SQS, not {expected}")
# Before the JSON protocol, system attributes were asked for as AttributeNames.
system_names = {"AttributeNames": ["All"]} if protocol == "query" else {"MessageSystemAttributeNames": ["All"]}


def check(condition, what):
    global checks
    if not condition:
        raise AssertionError(what)
    checks += 1


# Create, send with attributes (botocore checks MD5OfMessageBody and
# MD5OfMessageAttributes against what it sent), receive (checked again).
url = sqs.create_queue(QueueName="smoke", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
check(url.endswith("/000000000000/smoke"), "queue url")
attributes = {
    "kind": {"DataType": "String", "StringValue": "greeting"},
    "count": {"DataType": "Number", "StringValue": "42"},
    "raw": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
}
trace = {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"}}
sent = sqs.send_message(
    QueueUrl=url, MessageBody="hello from boto3 ✓", MessageAttributes=attributes, MessageSystemAttributes=trace
)
check(sent["MD5OfMessageBody"] == body_md5("hello from boto3 ✓"), "body digest of the send")
check(sent["MD5OfMessageAttributes"] == attributes_md5(attributes), "attribute digest of the send")
check(sent["MD5OfMessageSystemAttributes"] == attributes_md5(trace), "system attribute digest of the send")
got = sqs.receive_message(
    QueueUrl=url,
    MessageAttributeNames=["All"],
    WaitTimeSeconds=5,
    **system_names,
)
msg = got["Messages"][0]
check(msg["Body"] == "hello from boto3 ✓", "body")
check(msg["MessageAttributes"]["raw"]["BinaryValue"] == b"\x00\x01\xff", "binary attribute")
check(msg["MessageAttributes"]["count"]["StringValue"] == "42", "number attribute")
check(msg["Attributes"]["ApproximateReceiveCount"] == "1", "receive count")
check(msg["Attributes"]["AWSTraceHeader"] == trace["AWSTraceHeader"]["StringValue"], "trace header")
check(msg["MD5OfBody"] == body_md5(msg["Body"]), "body digest of the receive")
check(msg["MD5OfMessageAttributes"] == attributes_md5(msg["MessageAttributes"]), "attribute digest of the receive")

# Change visibility, then delete.
sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=5)
sqs.delete_message(QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"])
attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
check(attrs["ApproximateNumberOfMessages"] == "0", "queue empty after delete")
check(attrs["ApproximateNumberOfMessagesNotVisible"] == "0", "nothing in flight after delete")

# Batches (botocore checks each entry's digest).
batch = sqs.send_message_batch(
    QueueUrl=url,
    Entries=[{"Id": f"m{i}", "MessageBody": f"batch {i}"} for i in range(3)],
)
check(len(batch["Successful"]) == 3, "batch send")
check(all(e["MD5OfMessageBody"] == body_md5(f"batch {e['Id'][1:]}") for e in batch["Successful"]), "batch digests")
handles = []
for _ in range(5):
    r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=30)
    handles += [m["ReceiptHandle"] for m in r.get("Messages", [])]
    if len(handles) == 3:
        break
check(len(handles) == 3, "batch receive")
deleted = sqs.delete_message_batch(
    QueueUrl=url,
    Entries=[{"Id": f"d{i}", "ReceiptHandle": h} for i, h in enumerate(handles)]
    + [{"Id": "bogus", "ReceiptHandle": "bogus"}],
)
check(len(deleted["Successful"]) == 3, "batch delete")
check(deleted["Failed"][0]["Code"] == "ReceiptHandleIsInvalid", "batch partial failure")

# Dead-letter queue through a redrive policy.
dlq_url = sqs.create_queue(QueueName="smoke-dlq")["QueueUrl"]
dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
src_url = sqs.create_queue(
    QueueName="smoke-src",
    Attributes={
        "VisibilityTimeout": "1",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"}),
    },
)["QueueUrl"]
sqs.send_message(QueueUrl=src_url, MessageBody="poison")
first = sqs.receive_message(QueueUrl=src_url, WaitTimeSeconds=5)
check(len(first.get("Messages", [])) == 1, "poison received once")
deadline = time.time() + 15
dead = []
while not dead and time.time() < deadline:
    dead = sqs.receive_message(QueueUrl=dlq_url, WaitTimeSeconds=2).get("Messages", [])
check(dead and dead[0]["Body"] == "poison", "poison message in the dead-letter queue")
sources = sqs.list_dead_letter_source_queues(QueueUrl=dlq_url)["queueUrls"]
check(sources == [src_url], "dead-letter sources")

# Tags: set at creation, added, removed, listed.
tagged = sqs.create_queue(QueueName="smoke-tagged", tags={"team": "payments", "env": "dev"})["QueueUrl"]
sqs.tag_queue(QueueUrl=tagged, Tags={"env": "prod", "cost": "42 / ops"})
sqs.untag_queue(QueueUrl=tagged, TagKeys=["team"])
tags = sqs.list_queue_tags(QueueUrl=tagged).get("Tags", {})
check(tags == {"env": "prod", "cost": "42 / ops"}, f"queue tags: {tags}")
try:
    sqs.tag_queue(QueueUrl=tagged, Tags={"aws:reserved": "x"})
    check(False, "a reserved tag key should be refused")
except botocore.exceptions.ClientError as e:
    check(e.response["Error"]["Code"] == "InvalidParameterValue", "reserved tag key refused")
sqs.delete_queue(QueueUrl=tagged)

# The error shape for a missing queue: botocore maps it to the modeled
# exception through the query-compatible code.
try:
    sqs.get_queue_url(QueueName="no-such-queue")
    check(False, "missing queue should fail")
except sqs.exceptions.QueueDoesNotExist as e:
    check(e.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue", "error code")
    check(e.response["ResponseMetadata"]["HTTPStatusCode"] == 400, "status 400")
try:
    sqs.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=901)
    check(False, "bad delay should fail")
except botocore.exceptions.ClientError as e:
    check(e.response["Error"]["Code"] == "InvalidParameterValue", "invalid parameter")

if signed:
    try:
        client("wrong-" + secret).list_queues()
        check(False, "a wrong secret should be refused")
    except botocore.exceptions.ClientError as e:
        check(e.response["Error"]["Code"] == "SignatureDoesNotMatch", "wrong secret refused")
        check(e.response["ResponseMetadata"]["HTTPStatusCode"] == 403, "status 403")

for q in (src_url, dlq_url, url):
    sqs.delete_queue(QueueUrl=q)
print(
    f"boto3 smoke (botocore {botocore.__version__}, {protocol} protocol, {'signed' if signed else 'unsigned'}): "
    f"{checks} passed, 0 failed"
)
