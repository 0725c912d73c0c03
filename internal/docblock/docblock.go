// Package docblock reads the fenced blocks of the project's Markdown
// pages that tests run, so that a page's commands and what the tests do
// cannot drift apart. A tested block is the fenced block right after an
// HTML comment naming it: <!-- qemu-test: server -->.
package docblock

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Read returns the lines of the fenced block after the comment
// <!-- name --> in the Markdown file at path.
func Read(path, name string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	marker := "<!-- " + name + " -->"
	var lines []string
	state := 0 // 0: before the marker, 1: before the fence, 2: in the block
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case state == 0 && strings.TrimSpace(l) == marker:
			state = 1
		case state == 1 && strings.HasPrefix(l, "```"):
			state = 2
		case state == 1 && strings.TrimSpace(l) != "":
			return nil, fmt.Errorf("%s: %s is not followed by a fenced block", path, marker)
		case state == 2 && strings.HasPrefix(l, "```"):
			return lines, nil
		case state == 2:
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: no block %s (the comment, then a fenced block)", path, marker)
}
