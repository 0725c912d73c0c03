package cacheline

import "testing"

func TestMakeLengthAndCapacity(t *testing.T) {
	if s := Make[uint64](3, 5); len(s) != 3 || cap(s) != 5 {
		t.Fatalf("len %d cap %d", len(s), cap(s))
	}
	if b := Make[[3]byte](1, 2); len(b) != 1 || cap(b) != 2 {
		t.Fatal("odd element size")
	}
	if z := Make[struct{}](2, 2); len(z) != 2 {
		t.Fatal("zero-size element")
	}
	// Appending within the capacity must not allocate: the padding after
	// it is not part of the slice.
	s := Make[int](0, 4)
	if n := testing.AllocsPerRun(10, func() { s = append(s[:0], 1, 2, 3, 4) }); n != 0 {
		t.Fatalf("append within capacity allocated %v times", n)
	}
}
