//! SQS's query protocol, for SDKs from before the JSON protocol (botocore
//! 1.31.0 / boto3 1.28.0 speaks it, and is tested in server/tests/boto3.sh):
//! form-encoded requests (`Action=SendMessage&QueueUrl=...`) and XML
//! answers. A request becomes the JSON protocol's input for the same action
//! and an answer is rendered from the JSON protocol's output, so both
//! protocols run the same actions, checks and errors.
//!
//! Invariant: every field the JSON protocol reads has its query spelling
//! here (flattened lists `Name.N`, flattened maps `Name.N.Name` /
//! `Name.N.Value`, batch entries `...RequestEntry.N.Field`); a form that does
//! not decode is an SQS error, never a panic.

use std::collections::BTreeMap;

use hyper::Method;
use hyper::header::HeaderValue;
use serde_json::{Map, Value};

use crate::error::{ErrorCode, SqsError};

/// The XML namespace of SQS's query answers.
const NAMESPACE: &str = "http://queue.amazonaws.com/doc/2012-11-05/";

/// Fields the JSON protocol reads as integers.
const INTEGER_FIELDS: &[&str] = &[
    "DelaySeconds",
    "MaxNumberOfMessages",
    "VisibilityTimeout",
    "WaitTimeSeconds",
    "MaxResults",
    "MaxNumberOfMessagesPerSecond",
];

/// A form key split at its dots: a value, or named or numbered children.
#[derive(Debug, Default)]
struct Node {
    value: Option<String>,
    children: BTreeMap<String, Node>,
}

impl Node {
    fn insert(&mut self, path: &[&str], value: String) -> Result<(), SqsError> {
        match path.split_first() {
            None if self.value.is_some() => Err(SqsError::invalid("A query parameter is given twice.")),
            None => {
                self.value = Some(value);
                Ok(())
            }
            Some((head, rest)) => self.children.entry((*head).to_string()).or_default().insert(rest, value),
        }
    }

    /// The children named `1`, `2`, ... in numeric order (SQS numbers
    /// flattened members from 1); anything else under the name is an error.
    fn members(&self, name: &str) -> Result<Vec<&Node>, SqsError> {
        let mut numbered = Vec::with_capacity(self.children.len());
        for (index, node) in &self.children {
            match index.parse::<u32>() {
                Ok(n) if n >= 1 && !index.starts_with('0') => numbered.push((n, node)),
                _ => return Err(SqsError::invalid(format!("Query parameter {name}.{index} is not numbered from 1."))),
            }
        }
        numbered.sort_unstable_by_key(|(n, _)| *n);
        Ok(numbered.into_iter().map(|(_, node)| node).collect())
    }

    fn text(&self, name: &str) -> Result<String, SqsError> {
        match (&self.value, self.children.is_empty()) {
            (Some(value), true) => Ok(value.clone()),
            _ => Err(SqsError::invalid(format!("Query parameter {name} needs a single value."))),
        }
    }
}

/// Whether a `Content-Type` is the query protocol's form (case-blind, and
/// without an allocation: every request asks).
pub(crate) fn is_form(content_type: &str) -> bool {
    const FORM: &str = "application/x-www-form-urlencoded";
    content_type.get(..FORM.len()).is_some_and(|prefix| prefix.eq_ignore_ascii_case(FORM))
}

/// Whether a request speaks the query protocol: a `POST` of a form, or a
/// `GET` whose URL names an `Action`.
pub(crate) fn is_query_request(method: &Method, content_type: Option<&HeaderValue>, url_query: Option<&str>) -> bool {
    match *method {
        Method::POST => content_type.and_then(|v| v.to_str().ok()).is_some_and(is_form),
        Method::GET => url_query.is_some_and(|q| form_urlencoded::parse(q.as_bytes()).any(|(k, _)| k == "Action")),
        _ => false,
    }
}

/// The action and its JSON-protocol input from a request's URL query and
/// form body (a client may put parameters in either). A request without a
/// `QueueUrl` that was sent to a queue's URL (`/<account>/<name>`, as older
/// clients do) acts on that queue.
pub(crate) fn decode(
    url_query: Option<&str>,
    body: &[u8],
    path: &str,
    host: &str,
) -> Result<(String, Vec<u8>), SqsError> {
    let mut root = Node::default();
    let pairs = form_urlencoded::parse(url_query.unwrap_or("").as_bytes()).chain(form_urlencoded::parse(body));
    for (key, value) in pairs {
        let path: Vec<&str> = key.split('.').collect();
        if path.iter().any(|segment| segment.is_empty()) {
            return Err(SqsError::invalid(format!("Query parameter '{key}' is not a valid name.")));
        }
        root.insert(&path, value.into_owned())?;
    }
    let action = match root.children.remove("Action") {
        Some(node) => node.text("Action")?,
        None => {
            return Err(SqsError::new(ErrorCode::MissingParameter, "The request must contain the parameter Action."));
        }
    };
    root.children.remove("Version");
    let mut input = object(&root)?;
    if !input.contains_key("QueueUrl") && is_queue_path(path) {
        input.insert("QueueUrl".into(), Value::String(format!("http://{host}{path}")));
    }
    // CreateQueue spells its tags in lower case, TagQueue does not.
    if action == "TagQueue" {
        if let Some(tags) = input.remove("tags") {
            input.insert("Tags".into(), tags);
        }
    }
    Ok((action, Value::Object(input).to_string().into_bytes()))
}

/// `/<12-digit account>/<name>`: a queue's URL path.
fn is_queue_path(path: &str) -> bool {
    let mut parts = path.trim_start_matches('/').split('/');
    let account = parts.next().unwrap_or_default();
    let name = parts.next().unwrap_or_default();
    account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()) && !name.is_empty() && parts.next().is_none()
}

/// The JSON input object of a node's children.
fn object(node: &Node) -> Result<Map<String, Value>, SqsError> {
    let mut out = Map::new();
    for (name, child) in &node.children {
        let (field, value) = field(name, child)?;
        out.insert(field, value);
    }
    Ok(out)
}

/// One form field as its JSON name and value.
fn field(name: &str, node: &Node) -> Result<(String, Value), SqsError> {
    if node.value.is_some() && !node.children.is_empty() {
        return Err(SqsError::invalid(format!("Query parameter {name} is given both a value and members.")));
    }
    Ok(match name {
        "Attribute" => ("Attributes".into(), map(name, node, "Name", "Value")?),
        "Tag" => ("tags".into(), map(name, node, "Key", "Value")?),
        "MessageAttribute" | "MessageSystemAttribute" => (format!("{name}s"), map(name, node, "Name", "Value")?),
        "AttributeName" | "MessageAttributeName" | "MessageSystemAttributeName" | "TagKey" => {
            let names = node.members(name)?.into_iter().map(|n| n.text(name).map(Value::String));
            (format!("{name}s"), Value::Array(names.collect::<Result<_, _>>()?))
        }
        entries if entries.ends_with("RequestEntry") => {
            let members = node.members(name)?.into_iter().map(|n| object(n).map(Value::Object));
            ("Entries".into(), Value::Array(members.collect::<Result<_, _>>()?))
        }
        _ if !node.children.is_empty() => (name.to_string(), Value::Object(object(node)?)),
        integer if INTEGER_FIELDS.contains(&integer) => {
            let text = node.text(name)?;
            // Not a number: left as text, so the action's decoder refuses it.
            let value = text.parse::<i64>().map_or(Value::String(text), Value::from);
            (name.to_string(), value)
        }
        _ => (name.to_string(), Value::String(node.text(name)?)),
    })
}

/// A flattened map (`Name.N.<key>` and `Name.N.<value>`) as a JSON object.
fn map(name: &str, node: &Node, key: &str, value: &str) -> Result<Value, SqsError> {
    let mut out = Map::new();
    for member in node.members(name)? {
        let k = member.children.get(key).ok_or_else(|| SqsError::missing(&format!("{name}.N.{key}")))?;
        let v = member.children.get(value).ok_or_else(|| SqsError::missing(&format!("{name}.N.{value}")))?;
        let v = if v.children.is_empty() { Value::String(v.text(value)?) } else { Value::Object(object(v)?) };
        out.insert(k.text(key)?, v);
    }
    Ok(Value::Object(out))
}

/// An action's answer as the query protocol's XML.
pub(crate) fn render(action: &str, result: &Value, request_id: &str) -> String {
    let mut out = format!("<?xml version=\"1.0\"?><{action}Response xmlns=\"{NAMESPACE}\">");
    if let Some(fields) = result.as_object().filter(|fields| !fields.is_empty()) {
        out.push_str(&format!("<{action}Result>"));
        members(action, fields, &mut out);
        out.push_str(&format!("</{action}Result>"));
    }
    out.push_str(&format!("<ResponseMetadata><RequestId>{}</RequestId></ResponseMetadata>", escape(request_id)));
    out.push_str(&format!("</{action}Response>"));
    out
}

fn members(action: &str, fields: &Map<String, Value>, out: &mut String) {
    for (name, value) in fields {
        match (name.as_str(), value) {
            ("QueueUrls" | "queueUrls", Value::Array(urls)) => each("QueueUrl", urls, action, out),
            ("Messages", Value::Array(messages)) => each("Message", messages, action, out),
            ("Successful" | "Results", Value::Array(entries)) => {
                each(&format!("{action}ResultEntry"), entries, action, out);
            }
            ("Failed", Value::Array(entries)) => each("BatchResultErrorEntry", entries, action, out),
            ("Tags", Value::Object(map)) => {
                for (key, value) in map {
                    out.push_str(&format!("<Tag><Key>{}</Key>", escape(key)));
                    element_of("Value", value, action, out);
                    out.push_str("</Tag>");
                }
            }
            ("Attributes" | "MessageAttributes", Value::Object(map)) => {
                let element = name.trim_end_matches('s');
                for (key, value) in map {
                    out.push_str(&format!("<{element}><Name>{}</Name>", escape(key)));
                    element_of("Value", value, action, out);
                    out.push_str(&format!("</{element}>"));
                }
            }
            (_, Value::Array(items)) => each(name, items, action, out),
            _ => element_of(name, value, action, out),
        }
    }
}

/// Every item of a flattened list as one `<name>` element.
fn each(name: &str, items: &[Value], action: &str, out: &mut String) {
    for item in items {
        element_of(name, item, action, out);
    }
}

fn element_of(name: &str, value: &Value, action: &str, out: &mut String) {
    match value {
        Value::Null => {}
        Value::Object(fields) => {
            out.push_str(&format!("<{name}>"));
            members(action, fields, out);
            out.push_str(&format!("</{name}>"));
        }
        Value::String(text) => out.push_str(&format!("<{name}>{}</{name}>", escape(text))),
        other => out.push_str(&format!("<{name}>{other}</{name}>")),
    }
}

/// An error as the query protocol's `ErrorResponse`, with the query code
/// the SDKs map to their modeled errors.
pub(crate) fn render_error(error: &SqsError, request_id: &str) -> String {
    let fault = if error.code.is_sender_fault() { "Sender" } else { "Receiver" };
    format!(
        "<?xml version=\"1.0\"?><ErrorResponse xmlns=\"{NAMESPACE}\"><Error><Type>{fault}</Type><Code>{}</Code>\
         <Message>{}</Message><Detail/></Error><RequestId>{}</RequestId></ErrorResponse>",
        escape(error.code.query_code()),
        escape(&error.message),
        escape(request_id)
    )
}

/// Text as XML character data. A character XML 1.0 cannot carry at all
/// (control characters, U+FFFE, U+FFFF) becomes U+FFFD: message bodies
/// never hold one (a send checks them), but an error may quote a request's
/// own bad value, and the client must still be able to parse the error.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#xD;"),
            '\t' | '\n' => out.push(c),
            c if c < ' ' || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(form: &str) -> (String, Value) {
        let (action, json) = decode(None, form.as_bytes(), "/", "h").unwrap();
        (action, serde_json::from_slice(&json).unwrap())
    }

    #[test]
    fn a_form_becomes_the_json_protocols_input() {
        let (action, input) = decoded(
            "Action=SendMessageBatch&Version=2012-11-05&QueueUrl=http%3A%2F%2Fh%2F000000000000%2Fq\
             &SendMessageBatchRequestEntry.2.Id=b&SendMessageBatchRequestEntry.2.MessageBody=two\
             &SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=one+%26+more\
             &SendMessageBatchRequestEntry.1.DelaySeconds=5\
             &SendMessageBatchRequestEntry.1.MessageAttribute.1.Name=k\
             &SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=String\
             &SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue=v",
        );
        assert_eq!(action, "SendMessageBatch");
        assert_eq!(
            input,
            serde_json::json!({
                "QueueUrl": "http://h/000000000000/q",
                "Entries": [
                    {"Id": "a", "MessageBody": "one & more", "DelaySeconds": 5,
                     "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
                    {"Id": "b", "MessageBody": "two"},
                ],
            })
        );
        let (_, input) = decoded(
            "Action=ReceiveMessage&QueueUrl=u&AttributeName.2=SentTimestamp&AttributeName.1=All\
             &MessageAttributeName.1=All&MaxNumberOfMessages=10&WaitTimeSeconds=x",
        );
        assert_eq!(input["AttributeNames"], serde_json::json!(["All", "SentTimestamp"]));
        assert_eq!(input["MessageAttributeNames"], serde_json::json!(["All"]));
        assert_eq!(input["MaxNumberOfMessages"], 10);
        assert_eq!(input["WaitTimeSeconds"], "x", "left for the action to refuse");
        let (_, input) = decoded(
            "Action=CreateQueue&QueueName=q&Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=40\
             &Tag.1.Key=team&Tag.1.Value=a",
        );
        assert_eq!(input["Attributes"], serde_json::json!({"VisibilityTimeout": "40"}));
        assert_eq!(input["tags"], serde_json::json!({"team": "a"}));
        let (_, input) = decoded("Action=TagQueue&QueueUrl=u&Tag.1.Key=team&Tag.1.Value=b");
        assert_eq!(input["Tags"], serde_json::json!({"team": "b"}), "TagQueue's member is Tags");
        let (_, input) = decoded("Action=UntagQueue&QueueUrl=u&TagKey.1=team&TagKey.2=env");
        assert_eq!(input["TagKeys"], serde_json::json!(["team", "env"]));
    }

    #[test]
    fn parameters_may_come_in_the_url_and_the_queue_in_the_path() {
        let (action, json) =
            decode(Some("Action=SendMessage&MessageBody=in+the+url"), b"", "/000000000000/q", "h:1").unwrap();
        let input: Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(action, "SendMessage");
        assert_eq!(input["MessageBody"], "in the url");
        assert_eq!(input["QueueUrl"], "http://h:1/000000000000/q", "the queue of the path");
        // A QueueUrl given wins over the path; other paths name no queue.
        let (_, json) = decode(None, b"Action=SendMessage&QueueUrl=u", "/000000000000/q", "h").unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&json).unwrap()["QueueUrl"], "u");
        for path in ["/", "/queue", "/00000000000/q", "/000000000000/q/x", "/000000000000/"] {
            let (_, json) = decode(None, b"Action=ListQueues", path, "h").unwrap();
            assert!(serde_json::from_slice::<Value>(&json).unwrap().get("QueueUrl").is_none(), "{path}");
        }
        // A parameter given in both places is given twice.
        assert!(decode(Some("Action=ListQueues"), b"Action=ListQueues", "/", "h").is_err());
        assert!(is_query_request(&Method::GET, None, Some("Action=ListQueues&Version=2012-11-05")));
        assert!(!is_query_request(&Method::GET, None, Some("x=1")));
        assert!(!is_query_request(&Method::GET, None, None));
        let form = HeaderValue::from_static("application/x-www-form-urlencoded; charset=utf-8");
        assert!(is_query_request(&Method::POST, Some(&form), None));
        assert!(!is_query_request(&Method::PUT, Some(&form), None));
    }

    #[test]
    fn a_form_that_does_not_decode_is_an_error() {
        for form in [
            "QueueUrl=u",
            "Action=SendMessage&Action=ReceiveMessage",
            "Action=GetQueueAttributes&AttributeName.0=All",
            "Action=GetQueueAttributes&AttributeName.x=All",
            "Action=GetQueueAttributes&AttributeName.01=All",
            "Action=CreateQueue&Attribute.1.Name=VisibilityTimeout",
            "Action=CreateQueue&Attribute.1.Value=3",
            "Action=SendMessage&QueueUrl=u&QueueUrl.1=v",
            "Action=SendMessage&.=x",
            "Action.Sub=SendMessage",
        ] {
            assert!(decode(None, form.as_bytes(), "/", "h").is_err(), "{form}");
        }
    }

    #[test]
    fn answers_and_errors_render_as_the_query_protocols_xml() {
        let result = serde_json::json!({
            "Messages": [{
                "MessageId": "m-1", "Body": "<a & b>", "ReceiptHandle": "lq1.x",
                "Attributes": {"ApproximateReceiveCount": "2"},
                "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}},
            }],
        });
        let xml = render("ReceiveMessage", &result, "req-1");
        assert!(xml.starts_with("<?xml version=\"1.0\"?><ReceiveMessageResponse xmlns="), "{xml}");
        for part in [
            "<ReceiveMessageResult><Message>",
            "<Body>&lt;a &amp; b&gt;</Body>",
            "<Attribute><Name>ApproximateReceiveCount</Name><Value>2</Value></Attribute>",
            "<MessageAttribute><Name>k</Name><Value><DataType>String</DataType><StringValue>v</StringValue></Value>\
             </MessageAttribute>",
            "<ResponseMetadata><RequestId>req-1</RequestId></ResponseMetadata></ReceiveMessageResponse>",
        ] {
            assert!(xml.contains(part), "{part} in {xml}");
        }
        let batch = serde_json::json!({
            "Successful": [{"Id": "a", "MessageId": "m"}],
            "Failed": [{"Id": "b", "Code": "InvalidParameterValue", "Message": "no", "SenderFault": true}],
        });
        let xml = render("SendMessageBatch", &batch, "r");
        assert!(
            xml.contains(
                "<SendMessageBatchResultEntry><Id>a</Id><MessageId>m</MessageId></SendMessageBatchResultEntry>"
            )
        );
        assert!(
            xml.contains(
                "<BatchResultErrorEntry><Code>InvalidParameterValue</Code><Id>b</Id><Message>no</Message>\
                              <SenderFault>true</SenderFault></BatchResultErrorEntry>"
            ),
            "{xml}"
        );
        let xml = render("ListQueues", &serde_json::json!({"QueueUrls": ["u1", "u2"]}), "r");
        assert!(xml.contains("<ListQueuesResult><QueueUrl>u1</QueueUrl><QueueUrl>u2</QueueUrl></ListQueuesResult>"));
        let xml = render("ListQueueTags", &serde_json::json!({"Tags": {"team": "a&b"}}), "r");
        assert!(xml.contains("<ListQueueTagsResult><Tag><Key>team</Key><Value>a&amp;b</Value></Tag>"), "{xml}");
        let xml = render("DeleteMessage", &serde_json::json!({}), "r");
        assert!(!xml.contains("DeleteMessageResult"), "{xml}");
        let missing = SqsError::new(ErrorCode::QueueDoesNotExist, "The queue <q> does not exist.");
        let xml = render_error(&missing, "r");
        assert!(xml.contains("<Type>Sender</Type><Code>AWS.SimpleQueueService.NonExistentQueue</Code>"), "{xml}");
        assert!(xml.contains("<Message>The queue &lt;q&gt; does not exist.</Message>"), "{xml}");
        // A request's own unprintable value quoted in an error stays parseable XML.
        let quoted = SqsError::invalid("Value 'a\u{1}b\u{FFFF}' is invalid.\r\n");
        let xml = render_error(&quoted, "r");
        assert!(xml.contains("<Message>Value &apos;a\u{FFFD}b\u{FFFD}&apos; is invalid.&#xD;\n</Message>"), "{xml}");
    }
}
