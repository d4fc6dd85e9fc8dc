// Package doccheck finds references to files of the repository that are not
// there: Markdown links and their anchors, repository paths named in docs and
// comments (docs/..., internal/..., deploy/..., api/..., migrations/...,
// cmd/..., examples/...), links to the repository on GitHub, Markdown file
// names, and the sections quoted beside them (docs/deploy.md, "Probes").
// Its test runs it over every file of the repository.
package doccheck

import (
	"bytes"
	"fmt"
	"go/scanner"
	"go/token"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// RepoURL is the prefix of links to the repository's files on GitHub.
const RepoURL = "https://github.com/gatehouse-pay/gatehouse/"

// roots are the top-level directories whose paths are recognised in text.
var roots = []string{"docs", "internal", "deploy", "api", "migrations", "cmd", "examples"}

var (
	// A Markdown link or image, [text](target) or [text](target "title"),
	// and a reference definition, [label]: target.
	mdLink   = regexp.MustCompile(`!?\[[^\]]*\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	mdRefDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	// repoLink is a link to a file of the repository on GitHub.
	repoLink = regexp.MustCompile(regexp.QuoteMeta(RepoURL) + `(?:blob|tree)/main/([\w./-]+)(?:#([\w-]+))?`)
	// mdName is a Markdown file's name, possibly with a relative directory
	// (a whole word of path characters; see text).
	mdName = regexp.MustCompile(`^(?:\.\.?/)*(?:[\w-]+/)*[\w-][\w.-]*\.md$`)
	// Sections quoted beside a Markdown file, on one line: docs/deploy.md,
	// "Probes"; docs/deploy.md ("Probes"); "Probes" in (or of)
	// docs/deploy.md.
	sectionAfter  = regexp.MustCompile("([\\w./-]+\\.md)`?(?:, | \\()\"([^\"\\n]+)\"")
	sectionBefore = regexp.MustCompile("\"([^\"\\n]+)\" (?:in|of) `?([\\w./-]+\\.md)")
	// label is the bold label that starts a paragraph or a list item, which
	// the docs use as a section too.
	label      = regexp.MustCompile(`^\s*(?:[-*]\s+)?\*\*([^*]+)\*\*`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	heading    = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$`)
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
)

// kubectlObject is a Kubernetes object named the way kubectl takes it
// (deploy/gatehouse-worker): a deploy/ path that is not a path.
var kubectlObject = regexp.MustCompile(`^deploy/gatehouse-[\w-]+$`)

// Problem is one reference that does not resolve.
type Problem struct {
	File string // repository-relative, slash-separated
	Line int
	Ref  string
	Msg  string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Ref, p.Msg)
}

// Repo is a set of files (slash-separated paths relative to the repository's
// root) and a way to read them.
type Repo struct {
	files   map[string]bool
	dirs    map[string]bool
	read    func(name string) ([]byte, error)
	anchors map[string]map[string]bool
	labels  map[string][]string
}

// New returns the repository made of files, read through read.
func New(files []string, read func(name string) ([]byte, error)) *Repo {
	r := &Repo{files: map[string]bool{}, dirs: map[string]bool{".": true}, read: read, anchors: map[string]map[string]bool{}, labels: map[string][]string{}}
	for _, f := range files {
		r.files[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			r.dirs[d] = true
		}
	}
	return r
}

func (r *Repo) exists(name string) bool {
	return r.files[name] || r.dirs[name]
}

// resolve finds name relative to each of the directories in turn and
// returns the first that exists.
func (r *Repo) resolve(name string, dirs ...string) (string, bool) {
	for _, d := range dirs {
		p := path.Join(d, name)
		if strings.HasPrefix(p, "../") || p == ".." {
			continue
		}
		if r.exists(p) {
			return p, true
		}
	}
	return "", false
}

// Scanned reports whether the checker reads a file: Go (comments only),
// Markdown, YAML, JSON, env files, shell, SQL, the web assets, the Makefile
// and the Dockerfile. Test data is not read: fixtures may name anything.
func Scanned(name string) bool {
	if slices.Contains(strings.Split(name, "/"), "testdata") {
		return false
	}
	switch base := path.Base(name); base {
	case "Makefile", "Dockerfile":
		return true
	case "package-lock.json":
		return false
	}
	if strings.HasPrefix(name, ".ci/") {
		return true
	}
	switch path.Ext(name) {
	case ".go", ".md", ".yaml", ".yml", ".json", ".env", ".sh", ".sql", ".html", ".js", ".mjs", ".ts", ".css", ".conf", ".ini", ".toml":
		return true
	}
	return false
}

// CheckAll checks every scanned file.
func (r *Repo) CheckAll() ([]Problem, error) {
	var all []Problem
	names := make([]string, 0, len(r.files))
	for f := range r.files {
		if Scanned(f) {
			names = append(names, f)
		}
	}
	slices.Sort(names)
	for _, f := range names {
		data, err := r.read(f)
		if err != nil {
			return nil, err
		}
		all = append(all, r.Check(f, data)...)
	}
	return all, nil
}

// Check returns the references of one file, with its content, that do not
// resolve.
func (r *Repo) Check(name string, data []byte) []Problem {
	c := &checker{repo: r, file: name, dir: path.Dir(name), seen: map[string]bool{}}
	text := string(data)
	if strings.HasSuffix(name, ".go") {
		text = goComments(name, data)
	}
	if strings.HasSuffix(name, ".md") {
		r.parseHeadings(name, data)
		c.markdownLinks(text)
	}
	c.text(text)
	return c.problems
}

type checker struct {
	repo     *Repo
	file     string
	dir      string
	problems []Problem
	seen     map[string]bool
}

func (c *checker) report(line int, ref, format string, args ...any) {
	key := fmt.Sprint(line, "\x00", ref)
	if c.seen[key] {
		return
	}
	c.seen[key] = true
	c.problems = append(c.problems, Problem{File: c.file, Line: line, Ref: ref, Msg: fmt.Sprintf(format, args...)})
}

// goComments returns a Go file with everything but its comments blanked
// out, line breaks kept: offsets and lines stay those of the file.
func goComments(name string, src []byte) string {
	fset := token.NewFileSet()
	file := fset.AddFile(name, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, func(token.Position, string) {}, scanner.ScanComments)
	out := bytes.Repeat([]byte(" "), len(src))
	for i, b := range src {
		if b == '\n' {
			out[i] = '\n'
		}
	}
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return string(out)
		}
		if tok == token.COMMENT {
			off := file.Offset(pos)
			copy(out[off:], lit)
		}
	}
}

// pathByte reports whether b may be part of a path: [A-Za-z0-9_./-].
func pathByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_' || b == '.' || b == '/' || b == '-'
}

// maskURLs blanks out every URL (scheme://...): a path inside someone
// else's URL is not the repository's.
func maskURLs(text string) string {
	if !strings.Contains(text, "://") {
		return text
	}
	b := []byte(text)
	for from := 0; ; {
		i := strings.Index(text[from:], "://")
		if i < 0 {
			return string(b)
		}
		i += from
		start := i
		for start > 0 && (pathByte(text[start-1]) && text[start-1] != '/' && text[start-1] != '_' || text[start-1] == '+') {
			start--
		}
		end := i + 3
		for end < len(text) && !strings.ContainsRune(" \t\n)>]\"'`", rune(text[end])) {
			end++
		}
		if start < i {
			for j := start; j < end; j++ {
				b[j] = ' '
			}
		}
		from = end
	}
}

// text checks the repository links, paths, Markdown names and quoted
// sections of a file's text.
func (c *checker) text(text string) {
	var starts []int // offsets where lines start
	for i := 0; i >= 0; {
		starts = append(starts, i)
		j := strings.IndexByte(text[i:], '\n')
		if j < 0 {
			break
		}
		i += j + 1
	}
	lineAt := func(off int) int {
		n, _ := slices.BinarySearch(starts, off+1)
		return n
	}
	if strings.Contains(text, RepoURL) {
		for _, m := range repoLink.FindAllStringSubmatchIndex(text, -1) {
			target := strings.TrimRight(text[m[2]:m[3]], "./")
			anchor := ""
			if m[4] >= 0 {
				anchor = text[m[4]:m[5]]
			}
			c.target(lineAt(m[0]), text[m[0]:m[1]], target, anchor)
		}
	}
	masked := maskURLs(text)
	// Paths under the roots that start a word of path characters: not
	// inside another path ("./cmd/x" of some other module) or a URL.
	for _, root := range roots {
		for from := 0; ; {
			i := strings.Index(masked[from:], root+"/")
			if i < 0 {
				break
			}
			i += from
			end := i
			for end < len(masked) && pathByte(masked[end]) {
				end++
			}
			from = end
			if i > 0 && pathByte(masked[i-1]) {
				continue
			}
			p := strings.TrimRight(masked[i:end], "./")
			if !strings.Contains(p, "/") || kubectlObject.MatchString(p) {
				continue
			}
			if _, ok := c.repo.resolve(p, c.dir, "."); !ok {
				c.report(lineAt(i), p, "no such file or directory in the repository")
			}
		}
	}
	// Markdown names: the word of path characters that ends in .md, and
	// the sections quoted beside it on its line.
	lastLine := -1
	for from := 0; ; {
		i := strings.Index(masked[from:], ".md")
		if i < 0 {
			break
		}
		i += from
		end := i + len(".md")
		from = end
		if end < len(masked) && (pathByte(masked[end]) && masked[end] != '.' && masked[end] != '/') {
			continue // .mdx, .md5, x.md-y
		}
		start := i
		for start > 0 && pathByte(masked[start-1]) {
			start--
		}
		p := masked[start:end]
		if !mdName.MatchString(p) {
			continue
		}
		line := lineAt(start)
		resolved, ok := c.repo.resolve(p, c.dir, ".", "docs")
		if !ok {
			c.report(line, p, "no such Markdown file in the repository")
		} else if end < len(masked) && masked[end] == '#' {
			a := end + 1
			for a < len(masked) && (pathByte(masked[a]) && masked[a] != '.' && masked[a] != '/') {
				a++
			}
			c.anchor(line, masked[start:a], resolved, masked[end+1:a])
		}
		if line == lastLine {
			continue
		}
		lastLine = line
		l := masked[starts[line-1]:]
		if j := strings.IndexByte(l, '\n'); j >= 0 {
			l = l[:j]
		}
		for _, m := range sectionAfter.FindAllStringSubmatch(l, -1) {
			c.section(line, m[1], m[2])
		}
		for _, m := range sectionBefore.FindAllStringSubmatch(l, -1) {
			c.section(line, m[2], m[1])
		}
	}
}

// section checks that a Markdown file has a heading or a bold label that
// starts with title ("Probes", "One busy endpoint").
func (c *checker) section(line int, file, title string) {
	p, ok := c.repo.resolve(file, c.dir, ".", "docs")
	if !ok || !c.repo.files[p] {
		return // reported as a missing file
	}
	want := Slug(title)
	c.repo.headings(p) // reads the labels too
	for _, s := range c.repo.labels[p] {
		if s == want || strings.HasPrefix(s, want+"-") {
			return
		}
	}
	c.report(line, fmt.Sprintf("%s, %q", file, title), "%s has no heading or bold label that starts with %q", p, title)
}

// target checks a repository-relative target and its anchor.
func (c *checker) target(line int, ref, p, anchor string) {
	if !c.repo.exists(p) {
		c.report(line, ref, "no such file or directory in the repository")
		return
	}
	c.anchor(line, ref, p, anchor)
}

// anchor checks that p, when it is a Markdown file, has a heading whose
// anchor is anchor.
func (c *checker) anchor(line int, ref, p, anchor string) {
	if anchor == "" || !strings.HasSuffix(p, ".md") || !c.repo.files[p] {
		return
	}
	if !c.repo.headings(p)[strings.ToLower(anchor)] {
		c.report(line, ref, "%s has no heading with the anchor #%s", p, anchor)
	}
}

// markdownLinks checks the links of a Markdown file outside code.
func (c *checker) markdownLinks(doc string) {
	fence := ""
	for i, line := range strings.Split(doc, "\n") {
		if inCode(&fence, line) {
			continue
		}
		plain := codeSpan.ReplaceAllStringFunc(line, func(s string) string { return strings.Repeat(" ", len(s)) })
		var targets []string
		for _, m := range mdLink.FindAllStringSubmatch(plain, -1) {
			targets = append(targets, m[1])
		}
		if m := mdRefDef.FindStringSubmatch(plain); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			c.link(i+1, t)
		}
	}
}

// link checks one Markdown link target.
func (c *checker) link(line int, t string) {
	if scheme.MatchString(t) || strings.HasPrefix(t, "//") {
		return // a URL: repository URLs are checked with the text
	}
	p, anchor, _ := strings.Cut(t, "#")
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	switch {
	case p == "":
		if !c.repo.headings(c.file)[strings.ToLower(anchor)] {
			c.report(line, t, "no heading with the anchor #%s", anchor)
		}
		return
	case strings.HasPrefix(p, "/"):
		p = path.Clean(strings.TrimPrefix(p, "/"))
	default:
		p = path.Join(c.dir, p)
	}
	if p == ".." || strings.HasPrefix(p, "../") {
		c.report(line, t, "points outside the repository")
		return
	}
	c.target(line, t, p, anchor)
}

// inCode reports whether line is code: a fence (``` or ~~~, or longer) or
// a line between an opening fence and its closing one. fence holds the open
// fence, "" outside code.
func inCode(fence *string, line string) bool {
	s := strings.TrimLeft(line, " ")
	if len(line)-len(s) > 3 {
		return *fence != ""
	}
	for _, ch := range []string{"`", "~"} {
		n := len(s) - len(strings.TrimLeft(s, ch))
		if n < 3 {
			continue
		}
		switch {
		case *fence == "":
			*fence = s[:n]
		case strings.HasPrefix(s, *fence) && strings.TrimSpace(s[n:]) == "":
			*fence = ""
		}
		return true
	}
	return *fence != ""
}

// headings returns the anchors of the headings of p, a Markdown file,
// reading it once.
func (r *Repo) headings(p string) map[string]bool {
	if a, ok := r.anchors[p]; ok {
		return a
	}
	data, err := r.read(p)
	if err != nil {
		r.anchors[p] = map[string]bool{}
		return r.anchors[p]
	}
	return r.parseHeadings(p, data)
}

// parseHeadings reads the headings of p, whose content is data, into
// r.anchors, and the slugs of its headings and bold labels into r.labels.
func (r *Repo) parseHeadings(p string, data []byte) map[string]bool {
	if a, ok := r.anchors[p]; ok {
		return a
	}
	a := map[string]bool{}
	r.anchors[p] = a
	count := map[string]int{}
	fence := ""
	for _, line := range strings.Split(string(data), "\n") {
		if inCode(&fence, line) {
			continue
		}
		if m := label.FindStringSubmatch(line); m != nil {
			r.labels[p] = append(r.labels[p], Slug(m[1]))
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := Slug(m[2])
		r.labels[p] = append(r.labels[p], s)
		if n := count[s]; n > 0 {
			a[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			a[s] = true
		}
		count[s]++
	}
	return a
}

// Slug is the anchor GitHub gives a heading: its text (a link's text, not
// its target) in lower case, spaces turned to '-', and every character
// other than a letter, a digit, '-' or '_' dropped.
func Slug(h string) string {
	h = inlineLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
