//! A real browser for the dashboard's tests: Debian's headless `chromium`, driven through
//! `chromedriver`'s W3C WebDriver HTTP API with reqwest (no WebDriver crate). Start
//! chromedriver beside the lab (`Lab::spawn`, so it dies with the lab), then open one
//! [`Session`] per browser.

use std::time::Duration;

use serde_json::{Value, json};

/// Debian's chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's chromedriver (package `chromium-driver`).
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Bound on each WebDriver call (a navigation included).
const CALL: Duration = Duration::from_secs(60);

/// What went wrong talking to chromedriver.
#[derive(Debug, thiserror::Error)]
pub enum WebDriverError {
    /// The HTTP call failed.
    #[error("webdriver {what}: {source}")]
    Http {
        /// The command.
        what: String,
        /// The client's error.
        source: reqwest::Error,
    },
    /// chromedriver answered an error.
    #[error("webdriver {what}: {answer}")]
    Answer {
        /// The command.
        what: String,
        /// Its answer.
        answer: String,
    },
    /// A screenshot was not base64.
    #[error("webdriver screenshot: not base64")]
    Base64,
}

impl WebDriverError {
    /// WebDriver's "stale element reference": the element found is no longer in the page.
    fn is_stale_element(&self) -> bool {
        match self {
            WebDriverError::Answer { answer, .. } => serde_json::from_str::<Value>(answer)
                .ok()
                .and_then(|answer| {
                    answer
                        .pointer("/value/error")
                        .and_then(Value::as_str)
                        .map(|code| code == "stale element reference")
                })
                .unwrap_or(false),
            _ => false,
        }
    }
}

/// How often an element replaced under a command is looked up again.
const STALE_RETRIES: u32 = 5;

/// One browser: a WebDriver session.
pub struct Session {
    http: reqwest::Client,
    base: String,
}

async fn send(
    http: &reqwest::Client,
    what: &str,
    request: reqwest::RequestBuilder,
) -> Result<Value, WebDriverError> {
    let _ = http;
    let failed = |source| WebDriverError::Http {
        what: what.to_owned(),
        source,
    };
    let response = request.send().await.map_err(failed)?;
    let ok = response.status().is_success();
    let answer: Value = response.json().await.map_err(failed)?;
    if !ok {
        return Err(WebDriverError::Answer {
            what: what.to_owned(),
            answer: answer.to_string(),
        });
    }
    Ok(answer.get("value").cloned().unwrap_or(Value::Null))
}

impl Session {
    /// A new headless chromium from the chromedriver listening at `driver_url`, with its
    /// profile in `profile_dir`.
    pub async fn start(
        driver_url: &str,
        profile_dir: &std::path::Path,
    ) -> Result<Session, WebDriverError> {
        let http = reqwest::Client::builder()
            .timeout(CALL)
            .build()
            .map_err(|source| WebDriverError::Http {
                what: "client".to_owned(),
                source,
            })?;
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--window-size=1400,1000",
                    format!("--user-data-dir={}", profile_dir.display()),
                ],
            },
        }}});
        let value = send(
            &http,
            "new session",
            http.post(format!("{driver_url}/session"))
                .json(&capabilities),
        )
        .await?;
        let id = value
            .get("sessionId")
            .and_then(Value::as_str)
            .ok_or_else(|| WebDriverError::Answer {
                what: "new session".to_owned(),
                answer: value.to_string(),
            })?;
        Ok(Session {
            base: format!("{driver_url}/session/{id}"),
            http,
        })
    }

    async fn post(&self, what: &str, path: &str, body: Value) -> Result<Value, WebDriverError> {
        send(
            &self.http,
            what,
            self.http.post(format!("{}{path}", self.base)).json(&body),
        )
        .await
    }

    /// Loads `url` (and waits for it, as WebDriver does).
    pub async fn open(&self, url: &str) -> Result<(), WebDriverError> {
        self.post("navigate", "/url", json!({"url": url}))
            .await
            .map(|_| ())
    }

    /// Runs `script` (a function body; `arguments` are `args`) and returns its value.
    pub async fn run(&self, script: &str, args: Value) -> Result<Value, WebDriverError> {
        self.post(
            "execute",
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
        .await
    }

    /// The WebDriver id of the element `css` selects.
    async fn element(&self, css: &str) -> Result<String, WebDriverError> {
        let element = self
            .post(
                "find element",
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await?;
        element
            .as_object()
            .and_then(|object| object.values().next())
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| WebDriverError::Answer {
                what: format!("find {css}"),
                answer: element.to_string(),
            })
    }

    /// Finds the element `css` selects and sends `command` with `body` to it. A live page
    /// may replace the element between the find and the command; WebDriver then answers
    /// "stale element reference" without having acted, and the element is found again,
    /// as a user would look again.
    async fn on_element(
        &self,
        what: &str,
        css: &str,
        command: &str,
        body: Value,
    ) -> Result<(), WebDriverError> {
        let mut attempts = 0;
        loop {
            let id = self.element(css).await?;
            match self
                .post(what, &format!("/element/{id}/{command}"), body.clone())
                .await
            {
                Err(error) if error.is_stale_element() && attempts < STALE_RETRIES => {
                    attempts += 1;
                }
                answer => return answer.map(|_| ()),
            }
        }
    }

    /// Clicks the element `css` selects, as a user would (WebDriver element click).
    pub async fn click(&self, css: &str) -> Result<(), WebDriverError> {
        self.on_element("click", css, "click", json!({})).await
    }

    /// Types `text` into the element `css` selects.
    pub async fn type_into(&self, css: &str, text: &str) -> Result<(), WebDriverError> {
        self.on_element("type", css, "value", json!({"text": text}))
            .await
    }

    /// The page as a PNG.
    pub async fn screenshot(&self) -> Result<Vec<u8>, WebDriverError> {
        let value = send(
            &self.http,
            "screenshot",
            self.http.get(format!("{}/screenshot", self.base)),
        )
        .await?;
        decode_base64(value.as_str().unwrap_or_default()).ok_or(WebDriverError::Base64)
    }

    /// Closes the browser.
    pub async fn close(self) -> Result<(), WebDriverError> {
        send(&self.http, "delete session", self.http.delete(&self.base))
            .await
            .map(|_| ())
    }
}

/// Standard base64 (with padding), as WebDriver sends screenshots.
pub fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pads = chunk.iter().filter(|c| **c == b'=').count();
        let mut word = 0_u32;
        for (index, c) in chunk.iter().enumerate() {
            let v = if *c == b'=' { 0 } else { value(*c)? };
            word |= v << (18 - 6 * index);
        }
        let take = 3_usize.checked_sub(pads)?;
        out.extend_from_slice(&word.to_be_bytes()[1..1 + take]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes() {
        assert_eq!(decode_base64("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decode_base64("aGk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(decode_base64("YWJj").as_deref(), Some(&b"abc"[..]));
        assert_eq!(decode_base64("a*=="), None);
    }

    #[test]
    fn a_replaced_element_is_told_from_other_refusals() {
        let answer = |code: &str| WebDriverError::Answer {
            what: "type".to_owned(),
            answer: json!({"value": {"error": code, "message": "", "stacktrace": ""}}).to_string(),
        };
        assert!(answer("stale element reference").is_stale_element());
        assert!(!answer("no such element").is_stale_element());
        assert!(!answer("element not interactable").is_stale_element());
        assert!(!WebDriverError::Base64.is_stale_element());
    }
}
