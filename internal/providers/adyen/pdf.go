package adyen

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"sort"
	"strings"
)

// The page of the evidence document: A4, in points, with Courier (a
// fixed width font, 0.6 em per character) so that lines wrap by count.
const (
	pdfWidth    = 595
	pdfHeight   = 842
	pdfMargin   = 36
	pdfFontSize = 8
	pdfLeading  = 9.6
	// PDFLineChars is the characters of one line of the evidence
	// document: (595 - 2*36) / (0.6 * 8), rounded down.
	PDFLineChars = 108
	// PDFPageLines is the lines of one page of it: (842 - 2*36) / 9.6,
	// rounded down.
	PDFPageLines = 80
)

// pdfLine is one line of the document: a heading is set in bold.
type pdfLine struct {
	text    string
	heading bool
}

// EvidenceLines lays out the evidence of the dispute reference as the
// document's lines: a title, then each non-empty field in the order of
// its name, under a heading, wrapped at PDFLineChars characters (at a
// space when the line has one). A character the document's font cannot
// show (outside Windows-1252) is shown as "?".
func EvidenceLines(reference string, evidence map[string]string) []string {
	lines := evidenceLines(reference, evidence)
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.text
	}
	return out
}

func evidenceLines(reference string, evidence map[string]string) []pdfLine {
	lines := wrapText("Evidence for dispute "+reference, true)
	names := make([]string, 0, len(evidence))
	for n, v := range evidence {
		if strings.TrimSpace(v) != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		lines = append(lines, pdfLine{})
		lines = append(lines, wrapText(fieldLabel(n), true)...)
		lines = append(lines, wrapText(evidence[n], false)...)
	}
	return lines
}

// fieldLabel is a field's name as a heading: access_activity_log is
// "Access activity log".
func fieldLabel(name string) string {
	s := strings.ReplaceAll(name, "_", " ")
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// wrapText splits text into lines of at most PDFLineChars characters.
func wrapText(text string, heading bool) []pdfLine {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	text = strings.ReplaceAll(text, "\r", "\n")
	text = strings.ReplaceAll(text, "\t", "    ")
	var out []pdfLine
	for _, para := range strings.Split(text, "\n") {
		rs := []rune(winAnsiText(para))
		if len(rs) == 0 {
			out = append(out, pdfLine{heading: heading})
			continue
		}
		for len(rs) > 0 {
			n := min(len(rs), PDFLineChars)
			if n < len(rs) {
				if i := lastSpace(rs[:n+1]); i > 0 {
					n = i
				}
			}
			out = append(out, pdfLine{text: strings.TrimRight(string(rs[:n]), " "), heading: heading})
			rs = rs[n:]
			for len(rs) > 0 && rs[0] == ' ' {
				rs = rs[1:]
			}
		}
	}
	return out
}

func lastSpace(rs []rune) int {
	for i := len(rs) - 1; i > 0; i-- {
		if rs[i] == ' ' {
			return i
		}
	}
	return -1
}

// winAnsi maps the characters of Windows-1252's 0x80-0x9F to their bytes;
// 0x20-0x7E and 0xA0-0xFF are their own.
var winAnsi = map[rune]byte{
	'€': 0x80, '‚': 0x82, 'ƒ': 0x83, '„': 0x84, '…': 0x85, '†': 0x86, '‡': 0x87, 'ˆ': 0x88, '‰': 0x89,
	'Š': 0x8A, '‹': 0x8B, 'Œ': 0x8C, 'Ž': 0x8E, '‘': 0x91, '’': 0x92, '“': 0x93, '”': 0x94, '•': 0x95,
	'–': 0x96, '—': 0x97, '˜': 0x98, '™': 0x99, 'š': 0x9A, '›': 0x9B, 'œ': 0x9C, 'ž': 0x9E, 'Ÿ': 0x9F,
}

// winAnsiByte is the Windows-1252 byte of r, if it has one.
func winAnsiByte(r rune) (byte, bool) {
	switch {
	case r >= 0x20 && r <= 0x7E, r >= 0xA0 && r <= 0xFF:
		return byte(r), true
	}
	b, ok := winAnsi[r]
	return b, ok
}

// winAnsiText replaces the characters of s that Windows-1252 lacks, and
// control characters, with "?".
func winAnsiText(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { _, ok := winAnsiByte(r); return !ok }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if _, ok := winAnsiByte(r); ok {
			b.WriteRune(r)
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}

// pdfString is s as a PDF literal string in Windows-1252.
func pdfString(s string) string {
	var b strings.Builder
	b.WriteByte('(')
	for _, r := range s {
		c, ok := winAnsiByte(r)
		if !ok {
			c = '?'
		}
		switch {
		case c == '(' || c == ')' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x80:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "\\%03o", c)
		}
	}
	b.WriteByte(')')
	return b.String()
}

// EvidencePDF renders the evidence of the dispute reference as a PDF
// document (EvidenceLines, PDFPageLines lines a page) in the PDF standard
// fonts Courier and Courier-Bold, with compressed page contents: the
// defense document the adapter supplies to Adyen.
func EvidencePDF(reference string, evidence map[string]string) []byte {
	lines := evidenceLines(reference, evidence)
	var pages [][]pdfLine
	for len(lines) > 0 {
		n := min(len(lines), PDFPageLines)
		pages = append(pages, lines[:n])
		lines = lines[n:]
	}
	// Objects: 1 catalog, 2 pages, 3 and 4 fonts, then a page and its
	// contents for each page.
	var buf bytes.Buffer
	var offsets []int
	obj := func(body string) {
		offsets = append(offsets, buf.Len())
		fmt.Fprintf(&buf, "%d 0 obj\n%s\nendobj\n", len(offsets), body)
	}
	buf.WriteString("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	kids := make([]string, len(pages))
	for i := range pages {
		kids[i] = fmt.Sprintf("%d 0 R", 5+2*i)
	}
	obj("<< /Type /Catalog /Pages 2 0 R >>")
	obj(fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), len(pages)))
	obj("<< /Type /Font /Subtype /Type1 /BaseFont /Courier /Encoding /WinAnsiEncoding >>")
	obj("<< /Type /Font /Subtype /Type1 /BaseFont /Courier-Bold /Encoding /WinAnsiEncoding >>")
	for i, page := range pages {
		obj(fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> /Contents %d 0 R >>",
			pdfWidth, pdfHeight, 6+2*i))
		var content bytes.Buffer
		fmt.Fprintf(&content, "BT\n%g TL\n%d %d Td\n", pdfLeading, pdfMargin, pdfHeight-pdfMargin-pdfFontSize)
		font := ""
		for _, l := range page {
			if l.text != "" {
				f := "/F1"
				if l.heading {
					f = "/F2"
				}
				if f != font {
					fmt.Fprintf(&content, "%s %d Tf\n", f, pdfFontSize)
					font = f
				}
				fmt.Fprintf(&content, "%s Tj\n", pdfString(l.text))
			}
			content.WriteString("T*\n")
		}
		content.WriteString("ET\n")
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		_, _ = zw.Write(content.Bytes())
		_ = zw.Close()
		obj(fmt.Sprintf("<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream", z.Len(), z.Bytes()))
	}
	xref := buf.Len()
	fmt.Fprintf(&buf, "xref\n0 %d\n0000000000 65535 f \n", len(offsets)+1)
	for _, o := range offsets {
		fmt.Fprintf(&buf, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&buf, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(offsets)+1, xref)
	return buf.Bytes()
}
