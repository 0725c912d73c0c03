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

// Block is a fenced block of a page: its first line's number (the
// fence's, counting from 1) and its lines.
type Block struct {
	Line  int
	Lines []string
}

// All returns every fenced block of the Markdown file at path whose info
// string is lang (```yaml), marked or not: for tests that check that a
// page has no block of a kind they do not run, such as manifests applied
// to an API server.
func All(path, lang string) ([]Block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var blocks []Block
	var cur *Block // the block of lang being read
	inFence := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case !inFence && strings.HasPrefix(l, "```"):
			inFence = true
			if strings.TrimSpace(strings.TrimPrefix(l, "```")) == lang {
				blocks = append(blocks, Block{Line: n})
				cur = &blocks[len(blocks)-1]
			}
		case inFence && strings.HasPrefix(l, "```"):
			inFence, cur = false, nil
		case cur != nil:
			cur.Lines = append(cur.Lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if inFence {
		return nil, fmt.Errorf("%s: a fenced block is not closed", path)
	}
	return blocks, nil
}
