package writer

// StateList is the union list holding the sink's baselines, for tests that
// read them from a checkpoint.
const StateList = stateList
