//! The report's one way to write HTML: markup comes from the templates (string literals) and
//! from other [`Html`]; every argument a template takes is rendered by [`Render`], which escapes
//! text. A template may only have positional placeholders (`{}`, `{:.1}`, `{0}`), checked when
//! it is compiled, so no variable can slip in through `format!`'s implicit capture unescaped.

use std::fmt::{self, Write as _};

/// HTML being built. Its text is private: it grows only through [`html!`] and [`Html::push`].
#[derive(Default)]
pub(super) struct Html(String);

impl Html {
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// Appends markup built elsewhere.
    pub(super) fn push(&mut self, other: Html) {
        self.0.push_str(&other.0);
    }

    pub(super) fn into_string(self) -> String {
        self.0
    }

    /// Appends a template whose arguments [`html!`] wrapped in [`Escaped`]; not for direct use.
    #[doc(hidden)]
    pub(super) fn append_template(&mut self, args: fmt::Arguments<'_>) {
        // Writing to a String cannot fail.
        let _ = self.0.write_fmt(args);
    }
}

/// Markup that is a literal of this crate's (a style sheet, an attribute snippet): never host text.
#[derive(Clone, Copy)]
pub(super) struct Raw(pub &'static str);

/// How a template's argument goes into the page.
pub(super) trait Render {
    fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

impl Render for str {
    fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(self))
    }
}

impl Render for String {
    fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_str().render(f)
    }
}

impl Render for compact_str::CompactString {
    fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_str().render(f)
    }
}

impl<T: Render + ?Sized> Render for &T {
    fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).render(f)
    }
}

impl Render for Html {
    fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Render for Raw {
    fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Numbers need no escaping and keep the template's precision (`{:.1}`).
macro_rules! render_numbers {
    ($($t:ty),*) => {$(
        impl Render for $t {
            fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }
    )*};
}

render_numbers!(u8, u16, u32, u64, usize, i32, i64, f64);

/// A template argument on its way into the page: displayed through [`Render`].
#[doc(hidden)]
pub(super) struct Escaped<'a, T: Render + ?Sized>(pub &'a T);

impl<T: Render + ?Sized> fmt::Display for Escaped<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.render(f)
    }
}

/// Text as HTML text or attribute value.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push_str(&c.escape_default().to_string()),
            c => out.push(c),
        }
    }
    out
}

/// Whether every placeholder of `template` is positional (`{}`, `{:…}`, `{0…}`): a named one
/// would be filled by implicit capture, past [`Render`].
pub(super) const fn positional_only(template: &str) -> bool {
    let b = template.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'{' {
            if i + 1 < b.len() && b[i + 1] == b'{' {
                i += 2;
                continue;
            }
            if i + 1 >= b.len() || !(b[i + 1] == b'}' || b[i + 1] == b':' || b[i + 1].is_ascii_digit()) {
                return false;
            }
        }
        i += 1;
    }
    true
}

/// `html!(out, "<p>{}</p>", text)`: appends the template to `out` (an [`Html`]), each argument
/// rendered by [`Render`] (text escaped).
macro_rules! html {
    ($out:expr, $template:literal $(, $arg:expr)* $(,)?) => {{
        const _: () = assert!(
            $crate::export::report::html::positional_only($template),
            "an HTML template takes positional arguments only"
        );
        $out.append_template(format_args!($template $(, $crate::export::report::html::Escaped(&$arg))*))
    }};
}

pub(super) use html;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_markup_and_numbers_are_not() {
        let mut inner = Html::new();
        html!(inner, "<b>{}</b>", "<i>");
        let mut out = Html::new();
        html!(out, "<p title=\"{}\">{} {:.1} {}{}</p>", "a\"b", String::from("x & y"), 2.25, inner, Raw("<br>"));
        assert_eq!(out.into_string(), "<p title=\"a&quot;b\">x &amp; y 2.2 <b>&lt;i&gt;</b><br></p>");
        assert_eq!(escape("<a href=\"x\">'&"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;");
    }

    #[test]
    fn only_positional_placeholders_pass() {
        assert!(positional_only("<p>{}</p><p>{:.1}</p><p>{0}</p>{{literal}}"));
        assert!(!positional_only("<p>{name}</p>"));
        assert!(!positional_only("<p>{"));
    }
}
