package docs

import (
	"fmt"
	"net/http"
	"strings"
)

// Curl is one curl command of a markdown file's code blocks.
type Curl struct {
	// Line is the 1-based line the command starts on.
	Line int
	// Source is the command as written, continuation lines joined.
	Source string
	// Method is the HTTP method: -X, else POST with a body, else GET.
	Method string
	// URL is the address as written (often without a scheme).
	URL string
	// Header holds the -H headers.
	Header http.Header
	// Body is the -d data; HasBody says one was given.
	Body    string
	HasBody bool
}

// curlFlags are the boolean short flags the examples may combine (-sN, -si).
const curlFlags = "sSiNvfLk"

// Curls returns every curl command in the fenced code blocks of markdown,
// in order. A command starts on a line whose first word (after an optional
// "$ " prompt) is curl and goes on across quotes and trailing backslashes.
// A flag it does not know is an error, so an example cannot say more than
// the checks understand.
func Curls(markdown string) ([]Curl, error) {
	lines := strings.Split(markdown, "\n")
	var out []Curl
	fenced := false
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if strings.HasPrefix(trimmed, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			continue
		}
		cmd := strings.TrimPrefix(trimmed, "$ ")
		if !strings.HasPrefix(cmd, "curl ") {
			continue
		}
		start := i
		text := cmd
		words, open, err := shellWords(text)
		for err == nil && (open || strings.HasSuffix(strings.TrimRight(text, " "), "\\")) && i+1 < len(lines) {
			i++
			if strings.HasSuffix(strings.TrimRight(text, " "), "\\") && !open {
				text = strings.TrimSuffix(strings.TrimRight(text, " "), "\\") + " " + strings.TrimSpace(lines[i])
			} else {
				text += "\n" + lines[i]
			}
			words, open, err = shellWords(text)
		}
		if err == nil && open {
			err = fmt.Errorf("unterminated quote")
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", start+1, err)
		}
		c, err := parseCurl(words)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", start+1, err)
		}
		c.Line, c.Source = start+1, text
		out = append(out, c)
	}
	return out, nil
}

// shellWords splits one shell command into words: quotes group, a
// backslash escapes outside single quotes, and an unquoted |, ;, & or #
// ends the command. open reports a quote still open at the end.
func shellWords(s string) (words []string, open bool, err error) {
	var cur strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(rs) && strings.ContainsRune(`"\$`+"`", rs[i+1]):
				i++
				cur.WriteRune(rs[i])
			default:
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\':
			if i+1 < len(rs) {
				i++
				if rs[i] != '\n' {
					cur.WriteRune(rs[i])
					inWord = true
				}
			}
		case r == ' ' || r == '\t' || r == '\n':
			flush()
		case r == '|' || r == ';' || r == '&' || (r == '#' && !inWord):
			flush()
			return words, false, nil
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return words, true, nil
	}
	flush()
	return words, false, nil
}

// parseCurl reads the flags the examples use.
func parseCurl(words []string) (Curl, error) {
	c := Curl{Header: http.Header{}}
	if len(words) == 0 || words[0] != "curl" {
		return c, fmt.Errorf("not a curl command")
	}
	next := func(i *int, flag string) (string, error) {
		if *i+1 >= len(words) {
			return "", fmt.Errorf("%s needs a value", flag)
		}
		*i++
		return words[*i], nil
	}
	for i := 1; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "-X" || w == "--request":
			v, err := next(&i, w)
			if err != nil {
				return c, err
			}
			c.Method = v
		case strings.HasPrefix(w, "-X"):
			c.Method = strings.TrimPrefix(w, "-X")
		case w == "-H" || w == "--header":
			v, err := next(&i, w)
			if err != nil {
				return c, err
			}
			name, value, ok := strings.Cut(v, ":")
			if !ok {
				return c, fmt.Errorf("header %q has no colon", v)
			}
			c.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		case w == "-d" || w == "--data" || w == "--data-raw" || w == "--data-binary":
			v, err := next(&i, w)
			if err != nil {
				return c, err
			}
			c.Body, c.HasBody = v, true
		case strings.HasPrefix(w, "--"):
			return c, fmt.Errorf("unknown curl flag %s", w)
		case strings.HasPrefix(w, "-") && len(w) > 1:
			for _, f := range w[1:] {
				if !strings.ContainsRune(curlFlags, f) {
					return c, fmt.Errorf("unknown curl flag -%c in %s", f, w)
				}
			}
		default:
			if c.URL != "" {
				return c, fmt.Errorf("two addresses: %s and %s", c.URL, w)
			}
			c.URL = w
		}
	}
	if c.URL == "" {
		return c, fmt.Errorf("no address")
	}
	if c.Method == "" {
		c.Method = http.MethodGet
		if c.HasBody {
			c.Method = http.MethodPost
		}
	}
	return c, nil
}
