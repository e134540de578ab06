//! Every check of a delegated Session, one failure at a time, with the fixture keys: the
//! agent's long-term keys sign delegations, delegated keys sign Sessions.

use serde_json::{Value, json};

use super::*;
use crate::identity::testkeys::{AGENT, NOW, ORIGIN, jwk, key_set, sign};

const TARGET: RequestTarget<'static> = RequestTarget {
    method: "POST",
    path: "/billing/pay",
};
const SKEW: u64 = 60;

/// One Session and its delegation, valid until a test changes a part.
struct Case {
    /// The agent's long-term key that signs the delegation.
    long: &'static str,
    /// The key signing the Session: the delegated one (`cnf.jwk`) unless a test forges.
    signer: &'static str,
    /// The agent's keys the gateway knows.
    keys: Vec<&'static str>,
    dlg_header: Value,
    dlg: Value,
    header: Value,
    claims: Value,
    audience: Vec<String>,
}

impl Case {
    fn new(long: &'static str, delegated: &'static str) -> Case {
        Case {
            long,
            signer: delegated,
            keys: vec![long],
            dlg_header: json!({"typ": DELEGATION_TYP, "kid": long}),
            dlg: json!({"iss": AGENT, "iat": NOW, "exp": NOW + 3600, "cnf": {"jwk": jwk(delegated)}}),
            header: json!({"typ": SESSION_TYP}),
            claims: json!({
                "iss": AGENT, "sid": "s1", "sub": "u1", "iat": NOW, "exp": NOW + 300,
                "htu": format!("{ORIGIN}/billing/pay"), "htm": "POST",
            }),
            audience: Vec::new(),
        }
    }

    fn es256() -> Case {
        Case::new("es256-a", "es256-b")
    }

    fn token(&self) -> String {
        let dlg = sign(self.long, self.dlg_header.clone(), &self.dlg);
        let mut header = self.header.clone();
        header[DELEGATION_HEADER] = json!(dlg);
        sign(self.signer, header, &self.claims)
    }

    fn verify(&self) -> Result<Map<String, Value>, VerifyError> {
        let token = self.token();
        let header = peek_session(&token)?;
        let expect = Expectations {
            audience: self.audience.clone(),
            clock_skew_secs: SKEW,
            origins: vec!["https://other.example".into(), ORIGIN.into()],
        };
        let verified = DelegationCache::default();
        verify_delegated(
            &token,
            &header,
            &key_set(&self.keys),
            &verified,
            &expect,
            &TARGET,
            NOW,
        )
    }
}

#[test]
fn delegated_sessions_verify_with_es256_and_rs256_long_term_keys() {
    for (long, delegated) in [
        ("es256-a", "es256-b"),
        ("rs256-a", "rs256-b"),
        ("rs256-a", "es256-b"),
        ("es256-a", "rs256-b"),
    ] {
        let claims = Case::new(long, delegated).verify().unwrap();
        assert_eq!(claims["sid"], "s1", "{long} {delegated}");
    }
    // Among several keys, by kid.
    let mut case = Case::es256();
    case.keys = vec!["rs256-a", "es256-a"];
    assert!(case.verify().is_ok());
    // Without the optional members.
    let mut case = Case::es256();
    case.header = json!({});
    case.dlg_header = json!({"kid": "es256-a"});
    case.claims.as_object_mut().unwrap().remove("htm");
    assert!(case.verify().is_ok());
}

#[test]
fn the_delegation_must_verify_with_the_agents_key() {
    // Signed by another key under the agent's kid.
    let mut case = Case::es256();
    case.long = "es256-b";
    case.dlg_header["kid"] = json!("es256-a");
    assert_eq!(
        case.verify().unwrap_err(),
        VerifyError::DelegationBadSignature
    );
    // A kid the agent's keys do not have (yet): the caller reads them again.
    let mut case = Case::es256();
    case.long = "es256-b";
    case.dlg_header["kid"] = json!("es256-b");
    assert_eq!(
        case.verify().unwrap_err(),
        VerifyError::UnknownKey {
            issuer: AGENT.into(),
            kid: "es256-b".into()
        }
    );
    // An RS256 delegation under the agent's EC kid.
    let mut case = Case::es256();
    case.long = "rs256-a";
    case.dlg_header["kid"] = json!("es256-a");
    assert!(matches!(
        case.verify().unwrap_err(),
        VerifyError::DelegationAlgorithm { .. }
    ));
}

#[test]
fn the_session_must_verify_with_the_delegated_key() {
    // An RS256 Session with an EC delegated key.
    let mut case = Case::es256();
    case.signer = "rs256-b";
    assert_eq!(
        case.verify().unwrap_err(),
        VerifyError::SessionAlgorithm("RS256".into())
    );
    // The agent's long-term key signing the Session itself is not the delegated key.
    let mut case = Case::es256();
    case.signer = "es256-a";
    assert_eq!(case.verify().unwrap_err(), VerifyError::DelegatedSignature);
    // The delegated key names another algorithm.
    let mut case = Case::es256();
    case.dlg["cnf"]["jwk"]["alg"] = json!("ES384");
    assert_eq!(
        case.verify().unwrap_err(),
        VerifyError::SessionAlgorithm("ES256".into())
    );
}

#[test]
fn the_delegation_must_be_valid_now_and_short_lived() {
    let with = |name: &str, value: Value| {
        let mut case = Case::es256();
        case.dlg[name] = value;
        case.verify()
    };
    assert_eq!(
        with("exp", json!(NOW - SKEW - 1)).unwrap_err(),
        VerifyError::DelegationExpired
    );
    assert!(with("exp", json!(NOW - SKEW)).is_ok());
    assert_eq!(
        with("nbf", json!(NOW + SKEW + 1)).unwrap_err(),
        VerifyError::DelegationNotYetValid
    );
    assert!(with("nbf", json!(NOW + SKEW)).is_ok());
    let too_far = NOW + MAX_DELEGATION_AHEAD_SECS + SKEW + 1;
    assert_eq!(
        with("exp", json!(too_far)).unwrap_err(),
        VerifyError::DelegationTooLong
    );
    assert!(with("exp", json!(too_far - 1)).is_ok());
    assert!(matches!(
        with("exp", json!("tomorrow")).unwrap_err(),
        VerifyError::DelegationMalformed(_)
    ));
    let mut case = Case::es256();
    case.dlg.as_object_mut().unwrap().remove("exp");
    assert_eq!(
        case.verify().unwrap_err(),
        VerifyError::DelegationMalformed("no \"exp\" claim")
    );
}

#[test]
fn the_delegation_must_be_the_same_agents() {
    let mut case = Case::es256();
    case.dlg["iss"] = json!("https://other-agent.example/client.json");
    assert_eq!(case.verify().unwrap_err(), VerifyError::DelegationIssuer);
}

#[test]
fn a_delegation_and_a_session_are_never_confused() {
    // A delegation presented as a Session.
    let mut case = Case::es256();
    case.header["typ"] = json!(DELEGATION_TYP);
    assert_eq!(
        case.verify().unwrap_err(),
        VerifyError::SessionType(DELEGATION_TYP.into())
    );
    // A Session presented as a delegation.
    let mut case = Case::es256();
    case.dlg_header["typ"] = json!(SESSION_TYP);
    assert_eq!(
        case.verify().unwrap_err(),
        VerifyError::DelegationType(SESSION_TYP.into())
    );
    // Case-insensitively.
    let mut case = Case::es256();
    case.header["typ"] = json!("Poppy-Session+JWT");
    case.dlg_header["typ"] = json!("POPPY-DLG+JWT");
    assert!(case.verify().is_ok());
}

#[test]
fn the_delegated_key_must_be_a_public_signature_key() {
    let mut case = Case::es256();
    case.dlg["cnf"]["jwk"]["d"] = json!("c2VjcmV0");
    let error = case.verify().unwrap_err();
    assert!(
        matches!(&error, VerifyError::DelegatedKey(m) if m.contains("private")),
        "{error}"
    );
    assert!(!error.to_string().contains("c2VjcmV0"));
    let mut case = Case::es256();
    case.dlg["cnf"]["jwk"] = json!({"kty": "oct"});
    assert!(matches!(
        case.verify().unwrap_err(),
        VerifyError::DelegatedKey(_)
    ));
    let mut case = Case::es256();
    case.dlg.as_object_mut().unwrap().remove("cnf");
    assert!(matches!(
        case.verify().unwrap_err(),
        VerifyError::DelegatedKey(_)
    ));
}

#[test]
fn the_session_must_be_valid_now_and_short_lived() {
    let with = |changes: &[(&str, u64)]| {
        let mut case = Case::es256();
        for (name, value) in changes {
            case.claims[*name] = json!(value);
        }
        case.verify()
    };
    assert_eq!(
        with(&[("iat", NOW - 300), ("exp", NOW - SKEW - 1)]).unwrap_err(),
        VerifyError::Expired
    );
    assert!(with(&[("iat", NOW - 300), ("exp", NOW - SKEW)]).is_ok());
    assert_eq!(
        with(&[("iat", NOW + SKEW + 1), ("exp", NOW + SKEW + 2)]).unwrap_err(),
        VerifyError::IssuedInFuture
    );
    assert_eq!(
        with(&[("nbf", NOW + SKEW + 1)]).unwrap_err(),
        VerifyError::NotYetValid
    );
    assert_eq!(
        with(&[("exp", NOW + MAX_SESSION_LIFETIME_SECS + 1)]).unwrap_err(),
        VerifyError::LifetimeTooLong
    );
    for claim in [CLAIM_IAT, CLAIM_EXP, CLAIM_HTU] {
        let mut case = Case::es256();
        case.claims.as_object_mut().unwrap().remove(claim);
        assert_eq!(
            case.verify().unwrap_err(),
            VerifyError::MissingClaim(claim.into())
        );
    }
}

#[test]
fn the_session_must_name_this_origin_and_path() {
    let with = |htu: &str| {
        let mut case = Case::es256();
        case.claims[CLAIM_HTU] = json!(htu);
        case.verify()
    };
    assert!(with("HTTPS://API.Shop.Example/billing/pay").is_ok());
    assert!(with("https://other.example/billing/pay").is_ok());
    for wrong in [
        "https://evil.example/billing/pay",
        "http://api.shop.example/billing/pay",
        "https://api.shop.example:8443/billing/pay",
        "https://api.shop.example.evil.example/billing/pay",
        "https://api.shop.example/Billing/pay",
        "https://api.shop.example/billing/pay/",
        "https://api.shop.example//billing/pay",
        "https://api.shop.example/billing/pay?x=1",
        "https://api.shop.example/billing/pay#f",
        "/billing/pay",
        "https://api.shop.exampl€/billing/pay",
    ] {
        let error = with(wrong).unwrap_err();
        assert!(
            matches!(&error, VerifyError::WrongTarget { path, .. } if path == "/billing/pay"),
            "{wrong}: {error}"
        );
    }
}

#[test]
fn the_session_must_name_this_method_when_it_names_one() {
    let mut case = Case::es256();
    case.claims[CLAIM_HTM] = json!("GET");
    assert_eq!(
        case.verify().unwrap_err(),
        VerifyError::WrongMethod {
            htm: "GET".into(),
            method: "POST".into()
        }
    );
    case.claims[CLAIM_HTM] = json!("post");
    assert!(matches!(
        case.verify().unwrap_err(),
        VerifyError::WrongMethod { .. }
    ));
}

#[test]
fn an_audience_when_both_name_one() {
    let mut case = Case::es256();
    case.audience = vec!["https://shop.example".into()];
    assert!(case.verify().is_ok());
    case.claims["aud"] = json!(["https://x.example", "https://shop.example"]);
    assert!(case.verify().is_ok());
    case.claims["aud"] = json!("https://x.example");
    assert!(matches!(
        case.verify().unwrap_err(),
        VerifyError::WrongAudience(_)
    ));
    case.audience.clear();
    assert!(case.verify().is_ok());
}

#[test]
fn a_session_without_a_delegation_is_not_delegated() {
    let case = Case::es256();
    let token = sign("es256-b", json!({"typ": SESSION_TYP}), &case.claims);
    let header = peek_session(&token).unwrap();
    assert!(header.delegation.is_none());
    let expect = Expectations {
        audience: Vec::new(),
        clock_skew_secs: SKEW,
        origins: vec![ORIGIN.into()],
    };
    assert_eq!(
        verify_delegated(
            &token,
            &header,
            &key_set(&["es256-a"]),
            &DelegationCache::default(),
            &expect,
            &TARGET,
            NOW
        )
        .unwrap_err(),
        VerifyError::DelegationMissing
    );
    let token = sign(
        "es256-b",
        json!({"poppy_dlg": {"not": "a JWS"}}),
        &case.claims,
    );
    assert!(matches!(
        peek_session(&token).err().unwrap(),
        VerifyError::DelegationMalformed(_)
    ));
    let mut case = Case::es256();
    case.header[DELEGATION_HEADER] = json!("not.a.jws");
    let token = sign("es256-b", case.header.clone(), &case.claims);
    let header = peek_session(&token).unwrap();
    assert!(matches!(
        verify_delegated(
            &token,
            &header,
            &key_set(&["es256-a"]),
            &DelegationCache::default(),
            &expect,
            &TARGET,
            NOW
        )
        .unwrap_err(),
        VerifyError::DelegationMalformed(_)
    ));
}

#[test]
fn errors_never_carry_the_token() {
    let mut case = Case::es256();
    case.signer = "es256-a";
    let token = case.token();
    let signature = token.rsplit('.').next().unwrap();
    let message = case.verify().unwrap_err().to_string();
    assert!(!message.contains(signature), "{message}");
}

#[test]
fn possession_is_the_thumbprint_of_the_key_that_signed() {
    let case = Case::es256();
    let Value::Object(delegated) = jwk("es256-b") else {
        panic!()
    };
    let expected = cnf::thumbprint(&delegated).unwrap();
    assert_eq!(possession(&case.token(), NOW, SKEW), Some(expected));
    // No trust needed: a delegation from anyone proves possession of its own key.
    let mut foreign = Case::es256();
    foreign.long = "rs256-b";
    assert_eq!(possession(&foreign.token(), NOW, SKEW), Some(expected));
    // Another key's signature, an expired Session, no delegation: none.
    let mut forged = Case::es256();
    forged.signer = "es256-a";
    assert_eq!(possession(&forged.token(), NOW, SKEW), None);
    let mut expired = Case::es256();
    expired.claims["exp"] = json!(NOW - SKEW - 1);
    assert_eq!(possession(&expired.token(), NOW, SKEW), None);
    let bare = sign("es256-b", json!({}), &case.claims);
    assert_eq!(possession(&bare, NOW, SKEW), None);
    assert_eq!(possession("not a token", NOW, SKEW), None);
    // The RSA delegated key's thumbprint is its own.
    let rsa = Case::new("es256-a", "rs256-b");
    let Value::Object(delegated) = jwk("rs256-b") else {
        panic!()
    };
    assert_eq!(
        possession(&rsa.token(), NOW, SKEW),
        cnf::thumbprint(&delegated)
    );
}

/// `crit` (RFC 7515): a Session may mark its delegation critical; any other name, an empty
/// list, or a critical delegation member is refused rather than read without it.
#[test]
fn crit_names_only_what_is_understood() {
    let mut case = Case::es256();
    case.header["crit"] = json!([DELEGATION_HEADER]);
    assert!(case.verify().is_ok(), "the delegation is understood");
    for crit in [json!(["b64"]), json!([]), json!("poppy_dlg"), json!([1])] {
        let mut case = Case::es256();
        case.header["crit"] = crit.clone();
        assert!(
            matches!(case.verify().unwrap_err(), VerifyError::Invalid(_)),
            "Session crit {crit}"
        );
    }
    let mut case = Case::es256();
    case.dlg_header["crit"] = json!(["x-policy"]);
    assert!(
        case.verify().is_err(),
        "a delegation naming a critical extension"
    );
}

/// Times are NumericDates: a string `nbf`, `exp` or `iat` is refused, never skipped.
#[test]
fn time_claims_must_be_numbers() {
    for claim in ["nbf", "exp", "iat"] {
        let mut case = Case::es256();
        case.claims[claim] = json!((NOW + 10_000).to_string());
        assert!(
            matches!(case.verify().unwrap_err(), VerifyError::Invalid(_)),
            "a string {claim} in the Session"
        );
        let mut case = Case::es256();
        case.dlg[claim] = json!((NOW + 10_000).to_string());
        assert!(case.verify().is_err(), "a string {claim} in the delegation");
    }
}
