//! The web config file's YAML, as a small tree: mappings, sequences and
//! scalars (as text). Built from yaml-rust2's event parser rather than its
//! loader so that anchors and aliases are refused, not expanded (an alias
//! bomb of a few hundred bytes expands to gigabytes), and nesting is bounded.
//! A web config needs neither.

use yaml_rust2::parser::{Event, Parser};

/// Deeper than any web config (three levels) by far.
const MAX_DEPTH: usize = 16;
/// Entries of one mapping or sequence (a web config has a handful; the
/// duplicate-key check is quadratic).
const MAX_ENTRIES: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// An empty document, or `~`/`null`/nothing as a value.
    Null,
    Scalar(String),
    Seq(Vec<Node>),
    /// Keys in file order; a key twice is refused.
    Map(Vec<(String, Node)>),
}

/// Parses one YAML document; an empty file is [`Node::Null`].
pub fn parse(text: &str) -> Result<Node, String> {
    let mut p = Parser::new_from_str(text);
    let mut next = || -> Result<(Event, usize), String> {
        let (ev, mark) = p.next_token().map_err(|e| e.to_string())?;
        Ok((ev, mark.line()))
    };
    let mut doc = Node::Null;
    let mut documents = 0;
    loop {
        match next()?.0 {
            Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
            Event::StreamEnd => return Ok(doc),
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return Err("more than one YAML document".into());
                }
                doc = node(&mut next, None, 0)?;
            }
            other => return Err(format!("unexpected YAML event {other:?}")),
        }
    }
}

type Next<'a> = dyn FnMut() -> Result<(Event, usize), String> + 'a;

/// The node that starts with the next event (or `first`).
fn node(next: &mut Next<'_>, first: Option<(Event, usize)>, depth: usize) -> Result<Node, String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} levels"));
    }
    let (ev, line) = match first {
        Some(f) => f,
        None => next()?,
    };
    let at = |line: usize| format!(" (line {line})");
    match ev {
        Event::Alias(_) => Err(format!("YAML aliases are not accepted here{}", at(line))),
        Event::Scalar(_, _, anchor, _)
        | Event::SequenceStart(anchor, _)
        | Event::MappingStart(anchor, _)
            if anchor != 0 =>
        {
            Err(format!("YAML anchors are not accepted here{}", at(line)))
        }
        Event::Scalar(v, style, _, _) => {
            let plain = style == yaml_rust2::scanner::TScalarStyle::Plain;
            Ok(
                if plain && matches!(v.as_str(), "" | "~" | "null" | "Null" | "NULL") {
                    Node::Null
                } else {
                    Node::Scalar(v)
                },
            )
        }
        Event::SequenceStart(..) => {
            let mut items = Vec::new();
            loop {
                let (ev, line) = next()?;
                if ev == Event::SequenceEnd {
                    return Ok(Node::Seq(items));
                }
                if items.len() == MAX_ENTRIES {
                    return Err(format!(
                        "a list of more than {MAX_ENTRIES} items{}",
                        at(line)
                    ));
                }
                items.push(node(next, Some((ev, line)), depth + 1)?);
            }
        }
        Event::MappingStart(..) => {
            let mut entries: Vec<(String, Node)> = Vec::new();
            loop {
                let (ev, line) = next()?;
                let key = match ev {
                    Event::MappingEnd => return Ok(Node::Map(entries)),
                    Event::Scalar(k, _, 0, _) => k,
                    _ => return Err(format!("a mapping key that is not plain text{}", at(line))),
                };
                if entries.len() == MAX_ENTRIES {
                    return Err(format!(
                        "a mapping of more than {MAX_ENTRIES} keys{}",
                        at(line)
                    ));
                }
                if entries.iter().any(|(k, _)| *k == key) {
                    return Err(format!("key {key:?} given twice{}", at(line)));
                }
                let value = node(next, None, depth + 1)?;
                entries.push((key, value));
            }
        }
        other => Err(format!("unexpected YAML event {other:?}{}", at(line))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_sequences_and_scalars() {
        let n = parse("a: 1\nb: [x, 'y']\nc:\n  d: ~\n").expect("parses");
        assert_eq!(
            n,
            Node::Map(vec![
                ("a".into(), Node::Scalar("1".into())),
                (
                    "b".into(),
                    Node::Seq(vec![Node::Scalar("x".into()), Node::Scalar("y".into())])
                ),
                ("c".into(), Node::Map(vec![("d".into(), Node::Null)])),
            ])
        );
        assert_eq!(parse("").expect("empty"), Node::Null);
        assert_eq!(parse("# only a comment\n").expect("comment"), Node::Null);
        assert_eq!(
            parse("a: ''").expect("quoted empty"),
            Node::Map(vec![("a".into(), Node::Scalar(String::new()))])
        );
    }

    #[test]
    fn refuses_aliases_anchors_duplicates_depth_and_junk() {
        let bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n";
        assert!(parse(bomb).expect_err("anchors").contains("anchors"));
        assert!(parse("a: 1\na: 2\n").expect_err("dup").contains("twice"));
        let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
        assert!(parse(&deep).expect_err("deep").contains("deeper"));
        assert!(parse("a: [1\n").is_err());
        assert!(parse("---\na: 1\n---\nb: 2\n")
            .expect_err("two")
            .contains("more than one"));
        assert!(parse("? [a]\n: 1\n").is_err(), "a complex key");
        let wide: String = (0..2000).map(|i| format!("k{i}: v\n")).collect();
        assert!(parse(&wide).expect_err("wide").contains("more than 1024"));
    }
}
