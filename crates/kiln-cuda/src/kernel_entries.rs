//! The entry points of a kernel module, read from its source text, so that each kernel's name
//! is written once, beside its code. An entry is either a definition
//! `extern "C" __global__ void [__launch_bounds__(..)] NAME(` or an invocation of one of the
//! file's entry macros: a `#define M(P, ..)` whose body is such a definition, its name a
//! parameter (`NAME`) or pasted from parameters (`decode_attn_hd##HD`).

/// One `extern "C"` kernel of a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryPoint {
    pub name: String,
    /// The `__launch_bounds__` arguments, macro parameters replaced by their arguments.
    pub launch_bounds: Vec<String>,
    /// For an entry an entry macro makes: each parameter with its argument.
    pub macro_args: Vec<(String, String)>,
}

impl EntryPoint {
    /// The argument given for macro parameter `param`.
    pub fn arg(&self, param: &str) -> Option<&str> {
        self.macro_args
            .iter()
            .find(|(p, _)| p == param)
            .map(|(_, a)| a.as_str())
    }

    /// The number given for macro parameter `param`; an error naming the entry without one.
    pub fn num(&self, param: &str) -> anyhow::Result<usize> {
        self.arg(param)
            .and_then(|s| s.trim().parse::<usize>().ok())
            .ok_or_else(|| anyhow::anyhow!("entry {}: no number for {param}", self.name))
    }
}

/// Every entry point of `source`, in source order.
pub fn entry_points(source: &str) -> Result<Vec<EntryPoint>, String> {
    let (code, defines) = split_preprocessor(&strip_comments(source));
    let mut macros = Vec::new();
    for d in &defines {
        if let Some(m) = entry_macro(d)? {
            macros.push(m);
        }
    }
    let toks = lex(&code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if toks[i] == "extern" {
            if let Some((def, next)) = definition(&toks, i)? {
                if def.name.len() != 1 {
                    return Err(format!("`##` outside a macro in {}", def.name.join(" ")));
                }
                out.push(EntryPoint {
                    name: def.name[0].clone(),
                    launch_bounds: def.launch_bounds.iter().map(|a| a.join(" ")).collect(),
                    macro_args: Vec::new(),
                });
                i = next;
                continue;
            }
        } else if let Some(m) = macros.iter().find(|m| m.name == toks[i]) {
            if toks.get(i + 1).map(String::as_str) == Some("(") {
                let (args, next) = group(&toks, i + 1)?;
                out.push(m.expand(&args)?);
                i = next;
                continue;
            }
        }
        i += 1;
    }
    Ok(out)
}

/// `source` with every comment replaced by a space (newlines kept), string literals untouched.
fn strip_comments(source: &str) -> String {
    let b = source.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1)) {
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                out.push(b' ');
            }
            (b'/', Some(b'*')) => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    if b[i] == b'\n' {
                        out.push(b'\n');
                    }
                    i += 1;
                }
                i += 2;
                out.push(b' ');
            }
            (q @ (b'"' | b'\''), _) => {
                out.push(q);
                i += 1;
                while i < b.len() && b[i] != q {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        out.push(b[i]);
                        i += 1;
                    }
                    out.push(b[i]);
                    i += 1;
                }
                if i < b.len() {
                    out.push(q);
                    i += 1;
                }
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    // Only ASCII bytes were added or removed, and never inside a multi-byte character.
    String::from_utf8(out).expect("comment stripping keeps UTF-8")
}

/// Splits the text into code (preprocessor lines blanked) and the `#define` lines, each with
/// its backslash continuations joined.
fn split_preprocessor(text: &str) -> (String, Vec<String>) {
    let mut code = String::with_capacity(text.len());
    let mut defines = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if !line.trim_start().starts_with('#') {
            code.push_str(line);
            code.push('\n');
            continue;
        }
        let mut logical = String::new();
        let mut cur = line;
        while let Some(head) = cur.strip_suffix('\\') {
            logical.push_str(head);
            logical.push(' ');
            match lines.next() {
                Some(l) => cur = l,
                None => {
                    cur = "";
                    break;
                }
            }
        }
        logical.push_str(cur);
        let directive = logical.trim_start()[1..].trim_start();
        if let Some(rest) = directive.strip_prefix("define") {
            defines.push(rest.to_string());
        }
        code.push('\n');
    }
    (code, defines)
}

/// Identifiers and numbers as words, `##` and string literals whole, every other character
/// alone; whitespace dropped.
fn lex(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_whitespace() {
            i += 1;
            continue;
        } else if word(c) {
            while i < chars.len() && word(chars[i]) {
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i = (i + 1).min(chars.len());
        } else if c == '#' && chars.get(i + 1) == Some(&'#') {
            i += 2;
        } else {
            i += 1;
        }
        toks.push(chars[start..i].iter().collect());
    }
    toks
}

/// The parenthesised group opening at `toks[open]`, split at its top-level commas; returns the
/// arguments and the index after the closing parenthesis.
fn group(toks: &[String], open: usize) -> Result<(Vec<Vec<String>>, usize), String> {
    let mut args = vec![Vec::new()];
    let mut depth = 0;
    for (i, t) in toks.iter().enumerate().skip(open) {
        match t.as_str() {
            "(" => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            ")" => {
                depth -= 1;
                if depth == 0 {
                    if args.len() == 1 && args[0].is_empty() {
                        args.clear();
                    }
                    return Ok((args, i + 1));
                }
            }
            "," if depth == 1 => {
                args.push(Vec::new());
                continue;
            }
            _ => {}
        }
        args.last_mut()
            .expect("at least one argument")
            .push(t.clone());
    }
    Err(format!("unclosed parenthesis after `{}`", toks[open - 1]))
}

/// A kernel definition's name (its parts, joined by `##`) and launch bounds.
struct Definition {
    name: Vec<String>,
    launch_bounds: Vec<Vec<String>>,
}

/// Reads `extern "C" __global__ void [__launch_bounds__(..)] [__cluster_dims__(..)] NAME(` at
/// `toks[at]`: None when it is no kernel (another `extern`), an error when it is a kernel this
/// reader cannot follow.
fn definition(toks: &[String], at: usize) -> Result<Option<(Definition, usize)>, String> {
    let t = |i: usize| toks.get(i).map(String::as_str).unwrap_or("");
    if t(at + 1) != "\"C\"" || t(at + 2) != "__global__" {
        return Ok(None);
    }
    if t(at + 3) != "void" {
        return Err(format!("kernel returning `{}`, not void", t(at + 3)));
    }
    let mut i = at + 4;
    let mut launch_bounds = Vec::new();
    if t(i) == "__launch_bounds__" {
        (launch_bounds, i) = group(toks, i + 1)?;
    }
    // A cluster shape the kernel is compiled with; the entry's macro arguments say it again.
    if t(i) == "__cluster_dims__" {
        (_, i) = group(toks, i + 1)?;
    }
    let mut name = Vec::new();
    loop {
        let part = t(i);
        if !part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            return Err(format!("expected a kernel name, found `{part}`"));
        }
        name.push(part.to_string());
        i += 1;
        if t(i) != "##" {
            break;
        }
        i += 1;
    }
    if t(i) != "(" {
        return Err(format!("expected `(` after kernel {}", name.join("##")));
    }
    Ok(Some((
        Definition {
            name,
            launch_bounds,
        },
        i,
    )))
}

/// A function-like macro whose body defines a kernel.
struct EntryMacro {
    name: String,
    params: Vec<String>,
    def: Definition,
}

/// The entry macro a `#define` (text after the word) makes, if it makes one.
fn entry_macro(define: &str) -> Result<Option<EntryMacro>, String> {
    let toks = lex(define);
    // A function-like macro has its `(` right after the name.
    let rest = define.trim_start();
    let name_len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    if toks.len() < 2 || !rest[name_len..].starts_with('(') {
        return Ok(None);
    }
    let (params, body) = group(&toks, 1)?;
    let Some(at) = (body..toks.len()).find(|&i| toks[i] == "extern") else {
        return Ok(None);
    };
    let Some((def, _)) = definition(&toks, at)? else {
        return Ok(None);
    };
    let params = params.into_iter().map(|p| p.join(" ")).collect();
    Ok(Some(EntryMacro {
        name: toks[0].clone(),
        params,
        def,
    }))
}

impl EntryMacro {
    fn expand(&self, args: &[Vec<String>]) -> Result<EntryPoint, String> {
        if args.len() != self.params.len() {
            return Err(format!(
                "{} takes {} arguments, given {}",
                self.name,
                self.params.len(),
                args.len()
            ));
        }
        let macro_args: Vec<(String, String)> = self
            .params
            .iter()
            .cloned()
            .zip(args.iter().map(|a| a.join(" ")))
            .collect();
        let subst = |tok: &String| {
            macro_args
                .iter()
                .find(|(p, _)| p == tok)
                .map_or(tok.clone(), |(_, a)| a.clone())
        };
        Ok(EntryPoint {
            name: self.def.name.iter().map(subst).collect(),
            launch_bounds: self
                .def
                .launch_bounds
                .iter()
                .map(|a| a.iter().map(subst).collect::<Vec<_>>().join(" "))
                .collect(),
            macro_args,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(src: &str) -> Vec<String> {
        entry_points(src)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect()
    }

    #[test]
    fn definitions_with_and_without_launch_bounds() {
        let src = r#"
extern "C" __global__ void plain(int* x) { }
extern "C" __global__ void __launch_bounds__(256) bounded(int* x) { }
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    next_line(const float* __restrict__ x) { }
__device__ void helper() { }
extern "C" __device__ int not_a_kernel(int x) { return x; }
extern "C" __global__ void __launch_bounds__(128, 2) __cluster_dims__(2, 1, 1) clustered(int* x) { }
"#;
        let e = entry_points(src).unwrap();
        let n: Vec<&str> = e.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(n, ["plain", "bounded", "next_line", "clustered"]);
        assert_eq!(e[3].launch_bounds, ["128", "2"]);
        assert_eq!(e[1].launch_bounds, ["256"]);
        assert_eq!(e[2].launch_bounds, ["THREADS", "1"]);
    }

    #[test]
    fn comments_and_strings_hide_nothing_and_add_nothing() {
        let src = r#"
// extern "C" __global__ void commented(int* x) { }
/* extern "C" __global__ void
   block_commented(int* x) { } */
const char* s = "extern \"C\" __global__ void in_string(";
extern "C" __global__ void /* between */ real(int* x) { }
"#;
        assert_eq!(names(src), ["real"]);
    }

    #[test]
    fn entry_macros_expand_in_order_with_their_arguments() {
        let src = r#"
#define PASTE(HD, MINB)                                   \
    extern "C" __global__ void __launch_bounds__(128, MINB) \
    attn_hd##HD(const float* q) { body<HD>(q); }
#define NAMED(NAME, W) \
    extern "C" __global__ void __launch_bounds__(32 * W) NAME(float* y) { }
#define NOT_ENTRY(X) ((X) * 2)
PASTE(16, 4)
extern "C" __global__ void between(int* x) { }
NAMED(wide_8, 16)
int y = NOT_ENTRY(3);
"#;
        let e = entry_points(src).unwrap();
        let n: Vec<&str> = e.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(n, ["attn_hd16", "between", "wide_8"]);
        assert_eq!(e[0].launch_bounds, ["128", "4"]);
        assert_eq!(e[0].arg("HD"), Some("16"));
        assert_eq!(e[2].launch_bounds, ["32 * 16"]);
        assert_eq!(e[2].arg("W"), Some("16"));
        assert_eq!(e[2].arg("Q"), None);
    }

    #[test]
    fn kernels_it_cannot_read_are_errors() {
        let bad = [
            r#"extern "C" __global__ int returns_int(int* x) { }"#,
            r#"extern "C" __global__ void __launch_bounds__(256 broken(int* x) { }"#,
            r#"extern "C" __global__ void no_paren;"#,
            "#define E(N) extern \"C\" __global__ void N(int* x) { }\nE(a, b)",
        ];
        for src in bad {
            assert!(entry_points(src).is_err(), "accepted: {src}");
        }
    }
}
