use super::acls::{operation as op, pattern, permission, resource, AclBinding, AclFilter};
use super::command::*;
use super::fixture::*;

fn binding(name: &str, pattern_type: i8, principal: &str, operation: i8) -> AclBinding {
    AclBinding {
        resource_type: resource::TOPIC,
        resource_name: name.into(),
        pattern_type,
        principal: principal.into(),
        host: "*".into(),
        operation,
        permission: permission::ALLOW,
    }
}

fn created(o: Outcome) -> Vec<Result<(), ErrorCode>> {
    let Outcome::AclsCreated(v) = o else { panic!("{o:?}") };
    v.into_iter().map(|r| r.map_err(|f| f.code)).collect()
}

fn deleted(o: Outcome) -> Vec<Result<Vec<AclBinding>, ErrorCode>> {
    let Outcome::AclsDeleted(v) = o else { panic!("{o:?}") };
    v.into_iter().map(|r| r.map_err(|f| f.code)).collect()
}

fn describe(f: &Fixture, filter: &AclFilter) -> Result<Vec<AclBinding>, ErrorCode> {
    f.sm.describe_acls(&f.db.read(), filter).unwrap().map_err(|f| f.code)
}

#[test]
fn a_match_filter_finds_the_literal_wildcard_and_prefixed_bindings_of_a_name() {
    let mut f = Fixture::new();
    let all = vec![
        binding("orders", pattern::LITERAL, "User:a", op::READ),
        binding("*", pattern::LITERAL, "User:a", op::READ),
        binding("ord", pattern::PREFIXED, "User:b", op::WRITE),
        binding("orders-eu", pattern::LITERAL, "User:a", op::READ),
        binding("orders-", pattern::PREFIXED, "User:a", op::READ),
    ];
    assert_eq!(created(f.apply(Op::CreateAcls(all.clone()))), vec![Ok(()); 5]);
    // Again: already there, still a success, nothing doubled.
    assert_eq!(created(f.apply(Op::CreateAcls(all[..1].to_vec()))), vec![Ok(())]);
    assert_eq!(describe(&f, &AclFilter::any()).unwrap().len(), 5);

    let matching = AclFilter { resource_name: Some("orders".into()), pattern_type: pattern::MATCH, ..AclFilter::any() };
    let mut got = describe(&f, &matching).unwrap();
    got.sort();
    let mut want = all[..3].to_vec();
    want.sort();
    assert_eq!(got, want, "literal orders, literal *, prefix ord; not orders-eu nor prefix orders-");
    // A literal filter is the name exactly; ANY is any pattern type with that exact name.
    let literal = AclFilter { resource_name: Some("ord".into()), pattern_type: pattern::LITERAL, ..AclFilter::any() };
    assert_eq!(describe(&f, &literal).unwrap(), vec![]);
    let exact = AclFilter { resource_name: Some("ord".into()), ..AclFilter::any() };
    assert_eq!(describe(&f, &exact).unwrap(), vec![all[2].clone()]);
    let by_principal = AclFilter { principal: Some("User:b".into()), operation: op::WRITE, ..AclFilter::any() };
    assert_eq!(describe(&f, &by_principal).unwrap(), vec![all[2].clone()]);
}

#[test]
fn every_delete_filter_sees_the_bindings_as_they_were_and_the_union_goes() {
    let mut f = Fixture::new();
    let a = binding("orders", pattern::LITERAL, "User:a", op::READ);
    let b = binding("orders", pattern::LITERAL, "User:b", op::READ);
    f.apply(Op::CreateAcls(vec![a.clone(), b.clone()]));
    let by_a = AclFilter { principal: Some("User:a".into()), ..AclFilter::any() };
    let unknown = AclFilter { operation: op::UNKNOWN, ..AclFilter::any() };
    let got = deleted(f.apply(Op::DeleteAcls(vec![by_a, AclFilter::any(), unknown])));
    assert_eq!(got, vec![Ok(vec![a.clone()]), Ok(vec![a, b]), Err(ErrorCode::InvalidRequest)]);
    assert_eq!(describe(&f, &AclFilter::any()).unwrap(), vec![]);
}

#[test]
fn kafkas_rules_for_a_new_binding_are_enforced() {
    let mut f = Fixture::new();
    let ok = binding("orders", pattern::LITERAL, "User:a", op::READ);
    let bad = [
        AclBinding { resource_type: resource::ANY, ..ok.clone() },
        AclBinding { pattern_type: pattern::MATCH, ..ok.clone() },
        AclBinding { operation: op::ANY, ..ok.clone() },
        AclBinding { permission: permission::ANY, ..ok.clone() },
        AclBinding { resource_name: String::new(), ..ok.clone() },
        AclBinding { principal: "alice".into(), ..ok.clone() },
        AclBinding { host: String::new(), ..ok.clone() },
        AclBinding { resource_name: "x".repeat(5000), ..ok.clone() },
    ];
    let got = created(f.apply(Op::CreateAcls(bad.to_vec())));
    assert_eq!(got, vec![Err(ErrorCode::InvalidRequest); bad.len()]);
    assert_eq!(describe(&f, &AclFilter::any()).unwrap(), vec![]);
}

#[test]
fn acls_live_in_metadata_partition_0_only() {
    let mut f = Fixture::metadata_partition(1, 2);
    let ok = binding("orders", pattern::LITERAL, "User:a", op::READ);
    assert_eq!(created(f.apply(Op::CreateAcls(vec![ok]))), vec![Err(ErrorCode::InvalidRequest)]);
    assert_eq!(describe(&f, &AclFilter::any()), Err(ErrorCode::InvalidRequest));
}
