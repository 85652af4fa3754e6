package agg

// Accumulator folds the partial aggregates of one key and column between two
// writes, so that a writer combining many records per key does the
// function's work once per record and serializes once per write. For most
// functions it holds the combined partial and Add is Combine. For the
// sketches (rbm32, rbm64, hll) Combine would decode the accumulated sketch,
// union the input and encode it again, per record; an Accumulator keeps the
// sketch decoded instead, from the second non-null input on, and encodes it
// once, in Value.
//
// The law, tested for every function: Add(p1)...Add(pn) then Value equals
// Combine(...Combine(p1, p2)..., pn), up to the bytes of a sketch (both are
// the same sketch; Value's bytes are canonical).
//
// An Accumulator is a value: NewAccumulator does not allocate, so a writer
// can keep one per key and column in a slice. Make one with NewAccumulator
// (the zero Accumulator has no function). It is not safe for concurrent use.
type Accumulator struct {
	f    *Func
	v    Value   // the combined partial, while work is nil
	work working // empty until the first Add; the function's in-memory form once it has one
}

// working is a partial aggregate kept in a function's in-memory form.
type working interface {
	add(p Value) error
	value() (Value, error)
}

// empty is the work of an accumulator that holds nothing yet.
type empty struct{}

func (empty) add(Value) error       { panic("agg: add to an empty working form") }
func (empty) value() (Value, error) { return Value{}, nil }

// NewAccumulator returns an empty accumulator of partials of f. f must be
// able to pre-aggregate (CanCombine): Add returns Combine's error from the
// second partial on.
func (f *Func) NewAccumulator() Accumulator { return Accumulator{f: f, work: empty{}} }

// Add folds partial p (a result of Partial or Value) into the accumulator.
// On error the accumulator is unchanged.
func (a *Accumulator) Add(p Value) error {
	if a.work != nil {
		if _, ok := a.work.(empty); ok {
			a.v, a.work = p, nil
			return nil
		}
		return a.work.add(p)
	}
	if a.f.def.work != nil && !a.v.IsNull() && !p.IsNull() {
		// The second non-null input: from now on the sketch stays decoded.
		w, err := a.f.def.work(a.v)
		if err != nil {
			return err
		}
		if err := w.add(p); err != nil {
			return err
		}
		a.v, a.work = Value{}, w
		return nil
	}
	v, err := a.f.Combine(a.v, p)
	if err != nil {
		return err
	}
	a.v = v
	return nil
}

// Value returns the combined partial: null (absent) when nothing was added.
func (a *Accumulator) Value() (Value, error) {
	if a.work != nil {
		return a.work.value()
	}
	return a.v, nil
}
