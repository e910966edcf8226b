use std::time::Duration;

use super::*;

/// Test entries are written as JSON (which is YAML too); the caller's YAML loader hands
/// these types the same serde data model.
fn parse(json: &str) -> FileUpstream {
    serde_json::from_str(json).expect("valid FileUpstream")
}

fn pointers(result: Result<UpstreamSettings, Vec<UpstreamConfigProblem>>) -> Vec<String> {
    match result {
        Ok(_) => panic!("expected problems"),
        Err(problems) => problems.into_iter().map(|p| p.pointer).collect(),
    }
}

#[test]
fn defaults_are_valid() {
    let settings = parse(r#"{"base_url": "https://dms.example.com/api/"}"#)
        .validate()
        .expect("valid");
    assert_eq!(settings.connect_timeout, Duration::from_secs(2));
    assert_eq!(settings.request_timeout, Duration::from_secs(5));
    assert_eq!(settings.attempts, 2);
    assert_eq!(settings.backoff, Duration::from_millis(100));
    assert_eq!(settings.max_backoff, Duration::from_secs(1));
    assert_eq!(settings.budget_percent, 20);
    assert_eq!(settings.breaker_failures, 5);
    assert_eq!(settings.breaker_cool_down, Duration::from_secs(30));
    assert_eq!(settings.max_concurrency, 16);
    assert_eq!(settings.max_response_bytes, 4 * 1024 * 1024);
    assert!(settings.auth.is_none());
}

#[test]
fn every_problem_is_reported_with_its_pointer() {
    let file = parse(
        r#"{
              "base_url": "ftp://user:pw@x/?q=1",
              "timeouts": {"connect": "0s", "request": "soon"},
              "retries": {"attempts": 9, "backoff": "2s", "max_backoff": "1s", "budget_percent": 101},
              "circuit_breaker": {"failures": 0, "cool_down": "1h"},
              "max_concurrency": 0,
              "max_response_bytes": 10,
              "tls": {"ca_file": "/nonexistent/ca.pem"},
              "headers": {"Bad Header": "x", "X-Ok": "line\nbreak", "Host": "h"},
              "auth": {"kind": "api_key", "header": "X-Api-Key"},
              "soap": {"version": "1.1"},
              "smtp": {"from": "a@b", "to": ["c@d"]}
            }"#,
    );
    let got = pointers(file.validate());
    for expected in [
        "/soap",
        "/smtp",
        "/base_url",
        "/timeouts/connect",
        "/timeouts/request",
        "/retries/attempts",
        "/retries/max_backoff",
        "/retries/budget_percent",
        "/circuit_breaker/failures",
        "/circuit_breaker/cool_down",
        "/max_concurrency",
        "/max_response_bytes",
        "/tls/ca_file",
        "/headers/Bad Header",
        "/headers/X-Ok",
        "/headers/Host",
        "/auth/value",
    ] {
        assert!(got.contains(&expected.to_owned()), "{expected} in {got:?}");
    }
}

fn endpoint_pointers(json: &str) -> Vec<String> {
    match parse(json).validate_endpoint() {
        Ok(_) => panic!("expected problems in {json}"),
        Err(problems) => problems.into_iter().map(|p| p.pointer).collect(),
    }
}

#[test]
fn soap_upstreams_carry_their_version_and_ws_security() {
    let settings = parse(
        r#"{"kind": "soap", "base_url": "http://crm/LeadService.asmx",
                "auth": {"kind": "ws_security", "username": "demo-crm", "password": "pw"}}"#,
    )
    .validate()
    .expect("valid");
    let soap = settings.soap.expect("soap settings");
    assert_eq!(soap.version, SoapVersion::V1_1, "1.1 by default");
    let security = soap.security.expect("ws_security");
    assert_eq!(security.username, "demo-crm");
    assert_eq!(security.password.expose(), "pw");
    assert!(security.digest, "digest by default");
    assert!(settings.auth.is_none(), "no HTTP authentication");
    assert_eq!(
        settings.attempts, 2,
        "retries still default (idempotent calls only)"
    );

    // YAML reads an unquoted 1.2 as a number.
    for version in [r#""1.2""#, "1.2"] {
        let settings = parse(&format!(
            r#"{{"kind": "soap", "base_url": "http://crm/svc", "soap": {{"version": {version}}},
                    "auth": {{"kind": "ws_security", "username": "u", "password": "p",
                              "password_type": "text"}}}}"#
        ))
        .validate()
        .expect("valid");
        let soap = settings.soap.expect("soap settings");
        assert_eq!(soap.version, SoapVersion::V1_2);
        assert!(!soap.security.expect("ws_security").digest);
    }

    // A SOAP upstream may use HTTP authentication instead.
    let settings = parse(
        r#"{"kind": "soap", "base_url": "http://crm/svc",
                "auth": {"kind": "basic", "username": "u", "password": "p"}}"#,
    )
    .validate()
    .expect("valid");
    assert!(settings.auth.is_some());
    assert!(settings.soap.expect("soap").security.is_none());
    let rest = parse(r#"{"base_url": "http://x"}"#)
        .validate()
        .expect("valid");
    assert!(rest.soap.is_none());
}

#[test]
fn soap_settings_problems_are_located() {
    assert_eq!(
        endpoint_pointers(r#"{"base_url": "http://x", "soap": {"version": "1.1"}}"#),
        ["/soap"],
        "soap on a rest upstream"
    );
    assert_eq!(
        endpoint_pointers(
            r#"{"base_url": "http://x",
                    "auth": {"kind": "ws_security", "username": "u", "password": "p"}}"#
        ),
        ["/auth/kind"],
        "ws_security on a rest upstream"
    );
    assert_eq!(
        endpoint_pointers(
            r#"{"kind": "soap", "base_url": "http://x", "soap": {"version": "1.3"}}"#
        ),
        ["/soap/version"]
    );
    assert_eq!(
        endpoint_pointers(
            r#"{"kind": "soap", "base_url": "http://x",
                    "auth": {"kind": "ws_security", "username": "", "password_file": "/nonexistent"}}"#
        ),
        ["/auth/username", "/auth/password_file"]
    );
    assert!(
        serde_json::from_str::<FileUpstream>(
            r#"{"kind": "soap", "base_url": "http://x", "soap": {"version": "1.1", "style": "rpc"}}"#
        )
        .is_err(),
        "unknown soap keys"
    );
}

const SMTP: &str = r#""kind": "smtp", "base_url": "smtp://127.0.0.1:2525""#;

#[test]
fn smtp_upstreams_validate_into_mail_settings() {
    let settings = parse(&format!(
        r#"{{{SMTP},
                "smtp": {{"from": "Demo Honda Leads <leads@gateway.demo-honda.example>",
                          "to": ["leads@crm.demo-honda.example", "Backup <b@crm.example>"],
                          "hello_name": "gateway.example"}},
                "timeouts": {{"connect": "1s", "request": "10s"}},
                "auth": {{"kind": "basic", "username": "demo-smtp", "password": "pw"}}}}"#
    ))
    .validate_endpoint()
    .expect("valid");
    let EndpointSettings::Smtp(smtp) = settings else {
        panic!("smtp settings expected");
    };
    assert_eq!((smtp.host.as_str(), smtp.port), ("127.0.0.1", 2525));
    assert_eq!(
        smtp.tls,
        SmtpTls::StartTlsRequired,
        "STARTTLS required by default"
    );
    assert_eq!(
        smtp.from.to_string(),
        "Demo Honda Leads <leads@gateway.demo-honda.example>"
    );
    assert_eq!(smtp.to.len(), 2);
    assert_eq!(smtp.to[1].email.to_string(), "b@crm.example");
    assert_eq!(smtp.hello_name.as_deref(), Some("gateway.example"));
    let credentials = smtp.credentials.expect("credentials");
    assert_eq!(credentials.username, "demo-smtp");
    assert_eq!(credentials.password.expose(), "pw");
    assert_eq!(smtp.request_timeout, Duration::from_secs(10));

    for (url, port, tls) in [
        (
            "smtp://mail.example",
            SUBMISSION_PORT,
            SmtpTls::StartTlsRequired,
        ),
        ("smtps://mail.example", SMTPS_PORT, SmtpTls::Implicit),
        ("smtps://[::1]:1465/", 1465, SmtpTls::Implicit),
    ] {
        let settings = parse(&format!(
            r#"{{"kind": "smtp", "base_url": "{url}", "smtp": {{"from": "a@b.example", "to": ["c@d.example"]}}}}"#
        ))
        .validate_endpoint()
        .expect("valid");
        let EndpointSettings::Smtp(smtp) = settings else {
            panic!("smtp settings expected");
        };
        assert_eq!((smtp.port, smtp.tls), (port, tls), "{url}");
        assert!(!smtp.host.contains('['), "bare IPv6 address");
    }
}

#[test]
fn smtp_problems_are_located() {
    let cases: [(&str, &[&str]); 8] = [
        (r#""smtp": {"from": "a@b.example"}"#, &["/smtp/to"]),
        (
            r#"
                "smtp": {"from": "not a mailbox", "to": ["c@d.example", "jane at example"]}"#,
            &["/smtp/from", "/smtp/to/1"],
        ),
        ("", &["/smtp", "/smtp/from", "/smtp/to"]),
        (
            r#""smtp": {"to": ["c@d.example"], "hello_name": "has space"}"#,
            &["/smtp/from", "/smtp/hello_name"],
        ),
        (
            r#""smtp": {"from": "a@b.example", "to": ["c@d.example"]},
                   "retries": {"attempts": 1}, "headers": {"X-A": "1"}, "max_response_bytes": 2048,
                   "soap": {}"#,
            &["/soap", "/retries", "/headers", "/max_response_bytes"],
        ),
        (
            r#""smtp": {"from": "a@b.example", "to": ["c@d.example"]},
                   "auth": {"kind": "bearer", "token": "t"}"#,
            &["/auth/kind"],
        ),
        (
            r#""smtp": {"from": "a@b.example", "to": ["c@d.example"]},
                   "auth": {"kind": "basic", "username": "u"}"#,
            &["/auth/password"],
        ),
        (
            r#""smtp": {"from": "a@b.example", "to": ["c@d.example"]},
                   "timeouts": {"request": "0s"}"#,
            &["/timeouts/request"],
        ),
    ];
    for (extra, expected) in cases {
        let separator = if extra.is_empty() { "" } else { "," };
        assert_eq!(
            endpoint_pointers(&format!("{{{SMTP}{separator}{extra}}}")),
            expected,
            "{extra}"
        );
    }

    let mail = r#""smtp": {"from": "a@b.example", "to": ["c@d.example"], "starttls": "off"}"#;
    for (url, expected) in [
        ("smtps://mail.example", "/smtp/starttls"),
        ("http://mail.example", "/base_url"),
        ("smtp://mail.example:0", "/base_url"),
        ("smtp://mail.example/ehlo-name", "/base_url"),
        ("smtp://user:pw@mail.example", "/base_url"),
    ] {
        assert_eq!(
            endpoint_pointers(&format!(
                r#"{{"kind": "smtp", "base_url": "{url}", {mail}}}"#
            )),
            [expected],
            "{url}"
        );
    }
}

#[test]
fn http_validation_refuses_smtp_entries() {
    let file = parse(&format!(
        r#"{{{SMTP}, "smtp": {{"from": "a@b.example", "to": ["c@d.example"]}}}}"#
    ));
    assert_eq!(pointers(file.validate()), ["/kind"]);
}

#[test]
fn unknown_keys_are_rejected() {
    let bad = r#"{"base_url": "http://x", "timeouts": {"read": "1s"}}"#;
    assert!(serde_json::from_str::<FileUpstream>(bad).is_err());
    let bad_auth =
        r#"{"base_url": "http://x", "auth": {"kind": "bearer", "token": "t", "extra": 1}}"#;
    assert!(serde_json::from_str::<FileUpstream>(bad_auth).is_err());
}

#[test]
fn secrets_come_from_files_and_never_show_in_debug() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("token");
    std::fs::write(&path, "s3cr3t\n").expect("write");
    let file = parse(&format!(
        r#"{{"base_url": "http://x", "auth": {{"kind": "bearer", "token_file": {path:?}}}}}"#,
        path = path.display().to_string()
    ));
    let settings = file.validate().expect("valid");
    match &settings.auth {
        Some(UpstreamAuth::Static { value, .. }) => {
            assert_eq!(value.as_bytes(), b"Bearer s3cr3t");
            assert!(value.is_sensitive());
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(!format!("{settings:?}").contains("s3cr3t"));

    let inline = parse(
        r#"{"base_url": "http://x", "auth": {"kind": "basic", "username": "u", "password": "hunter2"}}"#,
    );
    assert!(!format!("{inline:?}").contains("hunter2"));
}

#[test]
fn both_or_neither_secret_is_a_problem() {
    let file = parse(
        r#"{"base_url": "http://x", "auth": {"kind": "bearer", "token": "a", "token_file": "/x"}}"#,
    );
    assert_eq!(pointers(file.validate()), ["/auth/token_file"]);
    let file = parse(
        r#"{"base_url": "http://x", "auth": {"kind": "oauth2", "token_url": "mailto:x", "client_id": ""}}"#,
    );
    let got = pointers(file.validate());
    assert!(got.contains(&"/auth/token_url".to_owned()), "{got:?}");
    assert!(got.contains(&"/auth/client_id".to_owned()), "{got:?}");
    assert!(got.contains(&"/auth/client_secret".to_owned()), "{got:?}");
}

#[test]
fn ca_files_must_hold_pem_certificates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ca.pem");
    std::fs::write(&path, "not a certificate").expect("write");
    let file = parse(&format!(
        r#"{{"base_url": "https://x", "tls": {{"ca_file": {path:?}}}}}"#,
        path = path.display().to_string()
    ));
    assert_eq!(pointers(file.validate()), ["/tls/ca_file"]);

    // The system bundle, where there is one, is a valid CA file.
    let system = "/etc/ssl/certs/ca-certificates.crt";
    if std::path::Path::new(system).exists() {
        let file = parse(&format!(
            r#"{{"base_url": "https://x", "tls": {{"ca_file": "{system}"}}}}"#
        ));
        assert!(!file.validate().expect("valid").ca_certificates.is_empty());
    }
}

#[test]
fn base64_matches_rfc4648_vectors() {
    for (input, expected) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(base64_encode(input.as_bytes()), expected);
    }
}

#[test]
fn a_requests_per_second_ceiling_is_a_positive_number_for_http_kinds() {
    let settings = parse(r#"{"base_url": "http://127.0.0.1:1", "max_requests_per_second": 0.5}"#)
        .validate()
        .expect("valid");
    assert_eq!(settings.max_requests_per_second, Some(0.5));
    let defaults = parse(r#"{"base_url": "http://127.0.0.1:1"}"#)
        .validate()
        .expect("valid");
    assert_eq!(
        defaults.max_requests_per_second, None,
        "no ceiling unless set"
    );
    for bad in ["0", "-3", "1e9"] {
        let json =
            format!(r#"{{"base_url": "http://127.0.0.1:1", "max_requests_per_second": {bad}}}"#);
        assert_eq!(
            pointers(parse(&json).validate()),
            vec!["/max_requests_per_second".to_owned()],
            "{bad}"
        );
    }
    let mail = r#"{"kind": "smtp", "base_url": "smtp://127.0.0.1:1", "max_requests_per_second": 2,
                   "smtp": {"from": "a@b.example", "to": ["c@d.example"], "starttls": "off"}}"#;
    assert!(endpoint_pointers(mail).contains(&"/max_requests_per_second".to_owned()));
}

/// An ed25519 key made with `ssh-keygen -t ed25519 -N ''` for these tests only.
const CLIENT_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACBo/XOgciOVtEJL+Pmlqw1jhcoI33Og2MgAKz1V121rRwAAAJBgs+8rYLPv
KwAAAAtzc2gtZWQyNTUxOQAAACBo/XOgciOVtEJL+Pmlqw1jhcoI33Og2MgAKz1V121rRw
AAAEDZWWawXc96K8Vw1Dx+8QtdbMopDhdsgEhbsee963kMSWj9c6ByI5W0Qkv4+aWrDWOF
ygjfc6DYyAArPVXXbWtHAAAAB3Jvb3RAdm0BAgMEBQY=
-----END OPENSSH PRIVATE KEY-----";

const HOST_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGj9c6ByI5W0Qkv4+aWrDWOFygjfc6DYyAArPVXXbWtH";

#[test]
fn an_sftp_entry_pins_the_host_key_and_logs_in_by_key_or_password() {
    let key = serde_json::to_string(CLIENT_KEY).expect("json");
    let settings = parse(&format!(
        r#"{{"kind": "sftp", "base_url": "sftp://files.vendor.example:2222/~/out%20going/",
            "sftp": {{"host_key": "[files.vendor.example]:2222 {HOST_KEY}"}},
            "auth": {{"kind": "ssh_key", "username": "dealer42", "private_key": {key}}}}}"#
    ))
    .validate()
    .expect("valid");
    let sftp = settings.sftp.expect("sftp settings");
    assert_eq!(
        (sftp.host.as_str(), sftp.port, sftp.directory.as_str()),
        ("files.vendor.example", 2222, "out going")
    );
    assert_eq!(sftp.host_keys.len(), 1);
    assert_eq!(
        sftp.host_key_algorithms.len(),
        1,
        "a whole key: its algorithm is asked for"
    );
    assert!(matches!(sftp.login, SftpLogin::Key(_)));

    let settings = parse(
        r#"{"kind": "sftp", "base_url": "sftp://10.0.0.7/exports",
            "sftp": {"host_key": ["SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8"]},
            "auth": {"kind": "basic", "username": "dealer42", "password": "pw"}}"#,
    )
    .validate()
    .expect("valid");
    let sftp = settings.sftp.expect("sftp settings");
    assert_eq!((sftp.port, sftp.directory.as_str()), (22, "/exports"));
    assert!(
        sftp.host_key_algorithms.is_empty(),
        "a fingerprint names no algorithm"
    );
    assert!(matches!(sftp.login, SftpLogin::Password(_)));
}

#[test]
fn an_sftp_entry_without_a_pin_or_login_is_refused_where_each_is_missing() {
    let got = pointers(
        parse(
            r#"{"kind": "sftp", "base_url": "sftp://u:p@files.vendor.example/x?y",
                "headers": {"X-A": "b"}, "retries": {"attempts": 1},
                "tls": {"insecure_skip_verify": true}}"#,
        )
        .validate(),
    );
    for expected in [
        "/base_url",
        "/sftp/host_key",
        "/auth",
        "/headers",
        "/retries",
        "/tls/insecure_skip_verify",
    ] {
        assert!(
            got.iter().any(|p| p == expected),
            "{expected} not in {got:?}"
        );
    }
    let problems = parse(
        r#"{"kind": "sftp", "base_url": "sftp://files.vendor.example/x", "sftp": {},
            "auth": {"kind": "ssh_key", "username": "d", "private_key": "not a key"}}"#,
    )
    .validate()
    .expect_err("refused");
    let pin = problems.iter().find(|p| p.pointer == "/sftp/host_key");
    assert!(
        pin.is_some_and(|p| p
            .message
            .contains("ssh-keyscan -p PORT host | ssh-keygen -lf -")),
        "{problems:?}"
    );
    let key = problems.iter().find(|p| p.pointer == "/auth/private_key");
    assert!(
        key.is_some_and(|p| !p.message.contains("not a key")),
        "the key's text is never echoed: {problems:?}"
    );
    // The keys of one kind are refused on the others.
    let got = pointers(
        parse(
            r#"{"base_url": "https://dms.example.com", "sftp": {"host_key": "SHA256:x"},
                "auth": {"kind": "ssh_key", "username": "d", "private_key": "k"}}"#,
        )
        .validate(),
    );
    assert!(
        got.contains(&"/sftp".to_owned()) && got.contains(&"/auth/kind".to_owned()),
        "{got:?}"
    );
}
